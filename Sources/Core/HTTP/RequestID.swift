/// Request ids: nginx's `$request_id` when forwarded (`X-Request-Id` header or a
/// `REQUEST_ID` fastcgi_param), otherwise 16 random bytes in hex.
enum RequestID {
    /// The id nginx forwarded, if it is a safe token (1–128 of `[A-Za-z0-9._-]`), so a
    /// client cannot inject header or log syntax through it.
    static func forwarded(in params: FastCGIParams) -> String? {
        for key in ["REQUEST_ID", "HTTP_X_REQUEST_ID"] {
            if let value = params[key], isAcceptable(value) { return value }
        }
        return nil
    }

    static func isAcceptable(_ value: String) -> Bool {
        let utf8 = value.utf8
        guard !utf8.isEmpty, utf8.count <= 128 else { return false }
        return utf8.allSatisfy { c in
            (c >= 48 && c <= 57) || (c >= 65 && c <= 90) || (c >= 97 && c <= 122)
                || c == UInt8(ascii: "-") || c == UInt8(ascii: "_") || c == UInt8(ascii: ".")
        }
    }

    /// 32 hex characters from `RAND_bytes`; falls back to a monotonic-clock id if OpenSSL's
    /// DRBG fails, since a request must not fail for want of a log correlation id.
    static func generate() -> String {
        if let bytes = try? SecureRandom.bytes(16) { return Hex.encode(bytes) }
        return "m" + String(monotonicMilliseconds(), radix: 16)
    }

    static func forParams(_ params: FastCGIParams) -> String {
        forwarded(in: params) ?? generate()
    }
}
