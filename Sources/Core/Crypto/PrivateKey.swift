import COpenSSL

/// A private key for signing: the development token key, the keys tests generate, and the
/// App Store Server API's In-App Purchase key (billing-rpc's only signing in production).
final class PrivateKey: @unchecked Sendable {
    // Owned; freed in deinit; never mutated after init.
    let pkey: OpaquePointer

    private init(owning pkey: OpaquePointer) { self.pkey = pkey }
    deinit { EVP_PKEY_free(pkey) }

    static func generateRSA(bits: Int = 2048) throws(CryptoError) -> PrivateKey {
        guard let key = copenssl_rsa_gen(UInt32(bits)) else { throw .openSSL("EVP_RSA_gen") }
        return PrivateKey(owning: key)
    }

    /// A key on `curve` (`prime256v1` = P-256, `secp384r1` = P-384).
    static func generateEC(curve: String = "prime256v1") throws(CryptoError) -> PrivateKey {
        guard let key = copenssl_ec_gen(curve) else { throw .openSSL("EVP_EC_gen") }
        return PrivateKey(owning: key)
    }

    /// A PEM private key (PKCS#8 or traditional).
    convenience init(pem: String) throws(CryptoError) {
        guard let key = withMemoryBIO(Array(pem.utf8), { PEM_read_bio_PrivateKey($0, nil, nil, nil) }) else {
            throw .openSSL("PEM_read_bio_PrivateKey")
        }
        self.init(owning: key)
    }

    var publicKey: PublicKey {
        get throws(CryptoError) { try PublicKey(pem: try writePEMForPublicKey()) }
    }

    func writePEMForPublicKey() throws(CryptoError) -> String {
        try writePEM { PEM_write_bio_PUBKEY($0, pkey) }
    }

    /// PKCS#8 PEM.
    func pem() throws(CryptoError) -> String {
        try writePEM { PEM_write_bio_PrivateKey($0, pkey, nil, nil, 0, nil, nil) }
    }

    private func writePEM(_ write: (OpaquePointer) -> Int32) throws(CryptoError) -> String {
        guard let bio = BIO_new(BIO_s_mem()) else { throw .openSSL("BIO_new") }
        defer { BIO_free(bio) }
        guard write(bio) == 1 else { throw .openSSL("PEM_write_bio") }
        var data: UnsafeMutablePointer<CChar>?
        let length = copenssl_bio_get_mem_data(bio, &data)
        guard let data, length > 0 else { throw .openSSL("BIO_get_mem_data") }
        return data.withMemoryRebound(to: UInt8.self, capacity: length) {
            String(decoding: UnsafeBufferPointer(start: $0, count: length), as: UTF8.self)
        }
    }

    /// Signs SHA-256 of `message`: PKCS#1 v1.5 for RSA, DER `ECDSA-Sig-Value` for EC.
    func signSHA256(_ message: some Collection<UInt8>) throws(CryptoError) -> [UInt8] {
        guard let ctx = EVP_MD_CTX_new() else { throw .openSSL("EVP_MD_CTX_new") }
        defer { EVP_MD_CTX_free(ctx) }
        guard EVP_DigestSignInit(ctx, nil, EVP_sha256(), nil, pkey) == 1 else { throw .openSSL("EVP_DigestSignInit") }
        var length = 0
        let ok = withContiguousBytes(message) { m -> Bool in
            guard EVP_DigestSign(ctx, nil, &length, m.baseAddress, m.count) == 1 else { return false }
            return true
        }
        guard ok else { throw .openSSL("EVP_DigestSign") }
        var signature = [UInt8](repeating: 0, count: length)
        let signed = withContiguousBytes(message) { m in
            EVP_DigestSign(ctx, &signature, &length, m.baseAddress, m.count) == 1
        }
        guard signed else { throw .openSSL("EVP_DigestSign") }
        return Array(signature.prefix(length))
    }
}

/// JOSE's ECDSA signatures are the raw `r‖s` of fixed width; OpenSSL signs and verifies the
/// DER `ECDSA-Sig-Value`. These convert between the two (RFC 7518 §3.4).
enum ECDSASignature {
    /// Raw `r‖s` (each `width` bytes: 32 for P-256) → DER. Throws on a wrong length.
    static func derFromRaw(_ raw: [UInt8], width: Int = 32) throws(CryptoError) -> [UInt8] {
        guard raw.count == 2 * width else { throw .invalidEncoding("ECDSA signature", "expected \(2 * width) bytes") }
        guard let sig = ECDSA_SIG_new() else { throw .openSSL("ECDSA_SIG_new") }
        defer { ECDSA_SIG_free(sig) }
        let r = BN_bin2bn(raw, Int32(width), nil)
        let s = raw.withUnsafeBufferPointer { BN_bin2bn($0.baseAddress! + width, Int32(width), nil) }
        guard let r, let s, ECDSA_SIG_set0(sig, r, s) == 1 else {  // set0 takes ownership on success
            BN_free(r)
            BN_free(s)
            throw .openSSL("ECDSA_SIG_set0")
        }
        var out: UnsafeMutablePointer<UInt8>?
        let length = i2d_ECDSA_SIG(sig, &out)
        guard length > 0, let out else { throw .openSSL("i2d_ECDSA_SIG") }
        defer { copenssl_free(out) }
        return Array(UnsafeBufferPointer(start: out, count: Int(length)))
    }

    /// DER → raw `r‖s`, each left-padded to `width` bytes.
    static func rawFromDER(_ der: [UInt8], width: Int = 32) throws(CryptoError) -> [UInt8] {
        let sig: OpaquePointer? = der.withUnsafeBufferPointer { buffer in
            var cursor: UnsafePointer<UInt8>? = buffer.baseAddress
            return d2i_ECDSA_SIG(nil, &cursor, buffer.count)
        }
        guard let sig else { throw .openSSL("d2i_ECDSA_SIG") }
        defer { ECDSA_SIG_free(sig) }
        var out = [UInt8](repeating: 0, count: 2 * width)
        guard let r = ECDSA_SIG_get0_r(sig), let s = ECDSA_SIG_get0_s(sig),
            BN_bn2binpad(r, &out, Int32(width)) == Int32(width)
        else { throw .openSSL("BN_bn2binpad") }
        let ok = out.withUnsafeMutableBufferPointer { BN_bn2binpad(s, $0.baseAddress! + width, Int32(width)) == Int32(width) }
        guard ok else { throw .openSSL("BN_bn2binpad") }
        return out
    }
}

extension PrivateKey {
    /// The public half as a PEM `PUBLIC KEY`.
    func publicKeyPEM() throws(CryptoError) -> String {
        try writePEMForPublicKey()
    }
}
