import COpenSSL

/// SHA-256 through OpenSSL's EVP interface.
enum SHA256 {
    static let digestByteCount = 32

    /// The 32-byte digest of `bytes`. EVP_Digest with a built-in algorithm fails only when
    /// OpenSSL cannot allocate, which this process cannot recover from either.
    static func hash(_ bytes: some Collection<UInt8>) -> [UInt8] {
        var digest = [UInt8](repeating: 0, count: digestByteCount)
        var length: UInt32 = 0
        let ok = withContiguousBytes(bytes) { input in
            digest.withUnsafeMutableBufferPointer { out in
                EVP_Digest(input.baseAddress, input.count, out.baseAddress, &length, EVP_sha256(), nil)
            }
        }
        guard ok == 1, length == UInt32(digestByteCount) else {
            preconditionFailure(CryptoError.openSSL("EVP_Digest(SHA-256)").debugDescription)
        }
        return digest
    }

    /// Lower-case hex of the digest of `bytes`.
    static func hexHash(_ bytes: some Collection<UInt8>) -> String {
        Hex.encode(hash(bytes))
    }

    /// Digest of a string's UTF-8 bytes.
    static func hash(_ text: String) -> [UInt8] { hash(Array(text.utf8)) }
}

/// Runs `body` over a contiguous view of `bytes`, copying only when the collection is not
/// contiguous already.
func withContiguousBytes<R>(_ bytes: some Collection<UInt8>, _ body: (UnsafeBufferPointer<UInt8>) -> R) -> R {
    if let result = bytes.withContiguousStorageIfAvailable(body) { return result }
    return Array(bytes).withUnsafeBufferPointer(body)
}
