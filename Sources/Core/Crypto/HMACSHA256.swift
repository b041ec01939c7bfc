import COpenSSL

/// HMAC-SHA-256 through OpenSSL 3's one-shot `EVP_Q_mac`.
enum HMACSHA256 {
    static let byteCount = 32

    /// The 32-byte authentication code of `message` under `key`.
    static func authenticationCode(key: some Collection<UInt8>, message: some Collection<UInt8>) throws(CryptoError) -> [UInt8] {
        var out = [UInt8](repeating: 0, count: byteCount)
        var outLength = 0
        let result = withContiguousBytes(key) { keyBuffer in
            withContiguousBytes(message) { messageBuffer in
                out.withUnsafeMutableBufferPointer { outBuffer in
                    // A zero-length key must still be a valid pointer for EVP_Q_mac.
                    withUnsafeBytes(of: UInt8(0)) { empty in
                        EVP_Q_mac(
                            nil, "HMAC", nil, "SHA256", nil,
                            keyBuffer.baseAddress.map(UnsafeRawPointer.init) ?? empty.baseAddress, keyBuffer.count,
                            messageBuffer.baseAddress ?? empty.baseAddress?.assumingMemoryBound(to: UInt8.self),
                            messageBuffer.count, outBuffer.baseAddress, outBuffer.count, &outLength)
                    }
                }
            }
        }
        guard result != nil, outLength == byteCount else { throw CryptoError.openSSL("EVP_Q_mac(HMAC-SHA256)") }
        return out
    }
}
