import COpenSSL

/// A failure inside OpenSSL or a rejected encoding. `description` is generic and safe to
/// show; `debugDescription` carries OpenSSL's drained error queue for logs.
struct CryptoError: Error, Sendable, Equatable, CustomStringConvertible, CustomDebugStringConvertible {
    private enum Code: String, Sendable {
        case openSSL = "openssl"
        case invalidEncoding = "invalid_encoding"
    }

    private let code: Code
    /// What was being attempted, e.g. "EVP_Digest" or "base64url decode".
    let operation: String
    /// OpenSSL's error strings (oldest first), or the reason an encoding was rejected.
    let details: [String]

    private init(code: Code, operation: String, details: [String]) {
        self.code = code
        self.operation = operation
        self.details = details
    }

    /// An OpenSSL call failed: drains (and so clears) this thread's OpenSSL error queue, so a
    /// stale entry never surfaces in an unrelated later failure.
    static func openSSL(_ operation: String) -> CryptoError {
        CryptoError(code: .openSSL, operation: operation, details: drainOpenSSLErrors())
    }

    /// Input that is not valid in the expected encoding (base64, hex, ...).
    static func invalidEncoding(_ operation: String, _ reason: String) -> CryptoError {
        CryptoError(code: .invalidEncoding, operation: operation, details: [reason])
    }

    var isInvalidEncoding: Bool { code == .invalidEncoding }

    var description: String {
        switch code {
        case .openSSL: return "cryptographic operation failed"
        case .invalidEncoding: return "invalid encoding"
        }
    }

    var debugDescription: String {
        "\(code.rawValue) in \(operation): " + (details.isEmpty ? "no details" : details.joined(separator: "; "))
    }
}

/// Empties this thread's OpenSSL error queue and returns its entries as text, oldest first.
func drainOpenSSLErrors() -> [String] {
    var messages: [String] = []
    while true {
        let code = ERR_get_error()
        if code == 0 { break }
        var buffer = [CChar](repeating: 0, count: 256)
        ERR_error_string_n(code, &buffer, buffer.count)
        messages.append(String(decoding: buffer.prefix(while: { $0 != 0 }).map { UInt8(bitPattern: $0) }, as: UTF8.self))
    }
    return messages
}
