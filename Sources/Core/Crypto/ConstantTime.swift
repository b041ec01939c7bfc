import COpenSSL

/// Compares two byte strings without a data-dependent early exit.
///
/// Both sides are first reduced to SHA-256 digests, and the digests are compared with
/// `CRYPTO_memcmp`: the time spent depends only on the two lengths, never on where the
/// contents differ, and a length mismatch is decided by the same comparison rather than by
/// a shortcut. Use it for secrets supplied by a caller (webhook `Authorization` headers,
/// compared whole).
func constantTimeEquals(_ a: [UInt8], _ b: [UInt8]) -> Bool {
    let left = SHA256.hash(a)
    let right = SHA256.hash(b)
    let differs = left.withUnsafeBytes { l in
        right.withUnsafeBytes { r in CRYPTO_memcmp(l.baseAddress, r.baseAddress, SHA256.digestByteCount) }
    }
    // The length test is only a belt to the digest's braces; it runs after the full compare.
    return (differs == 0) && (a.count == b.count)
}

/// `constantTimeEquals` over the UTF-8 bytes of two strings.
func constantTimeEquals(_ a: String, _ b: String) -> Bool {
    constantTimeEquals(Array(a.utf8), Array(b.utf8))
}
