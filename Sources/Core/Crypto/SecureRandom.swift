import COpenSSL

/// Cryptographically secure random bytes from OpenSSL's DRBG (`RAND_bytes`, thread-safe).
enum SecureRandom {
    static func bytes(_ count: Int) throws(CryptoError) -> [UInt8] {
        precondition(count >= 0 && count <= Int(Int32.max))
        var out = [UInt8](repeating: 0, count: count)
        let ok = out.withUnsafeMutableBufferPointer { RAND_bytes($0.baseAddress, Int32(count)) }
        guard ok == 1 else { throw CryptoError.openSSL("RAND_bytes") }
        return out
    }
}
