import COpenSSL

/// One X.509 certificate owned as an OpenSSL `X509`; used only inside the App Store verifier.
final class X509Certificate {
    // Owned; freed in deinit.
    private let handle: OpaquePointer

    init(owning handle: OpaquePointer) { self.handle = handle }

    /// Parses DER; nil when it is not one complete certificate.
    convenience init?(der: [UInt8]) {
        let parsed: OpaquePointer? = der.withUnsafeBufferPointer { buffer in
            var cursor: UnsafePointer<UInt8>? = buffer.baseAddress
            guard let cert = d2i_X509(nil, &cursor, buffer.count) else { return nil }
            return cert
        }
        guard let parsed else {
            _ = drainOpenSSLErrors()
            return nil
        }
        self.init(owning: parsed)
    }

    deinit { X509_free(handle) }

    /// The handle for the duration of `body` (it stays owned by this object).
    func withHandle<T, E: Error>(_ body: (OpaquePointer) throws(E) -> T) throws(E) -> T {
        try withExtendedLifetime(self) { () throws(E) -> T in try body(handle) }
    }

    func der() -> [UInt8]? {
        var out: UnsafeMutablePointer<UInt8>?
        let length = i2d_X509(handle, &out)
        guard length > 0, let out else { return nil }
        defer { copenssl_free(out) }
        return Array(UnsafeBufferPointer(start: out, count: Int(length)))
    }
}
