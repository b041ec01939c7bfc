import COpenSSL

/// A public key (RSA or EC) owned as an OpenSSL `EVP_PKEY`. Immutable once built; OpenSSL 3
/// allows concurrent verification with one `EVP_PKEY`, so an instance is shared by threads.
final class PublicKey: @unchecked Sendable {
    enum Kind: Sendable, Equatable {
        case rsa(bits: Int)
        /// The curve's OpenSSL name, e.g. `prime256v1` (P-256).
        case ec(curve: String)
    }

    // Owned; freed in deinit; never mutated after init.
    let pkey: OpaquePointer
    let kind: Kind

    init(owning pkey: OpaquePointer) throws(CryptoError) {
        self.pkey = pkey
        switch EVP_PKEY_get_base_id(pkey) {
        case EVP_PKEY_RSA:
            kind = .rsa(bits: Int(EVP_PKEY_get_bits(pkey)))
        case EVP_PKEY_EC:
            var name = [CChar](repeating: 0, count: 64)
            var length = 0
            guard EVP_PKEY_get_group_name(pkey, &name, name.count, &length) == 1 else {
                EVP_PKEY_free(pkey)
                throw .openSSL("EVP_PKEY_get_group_name")
            }
            kind = .ec(curve: String(decoding: name.prefix(length).map { UInt8(bitPattern: $0) }, as: UTF8.self))
        default:
            EVP_PKEY_free(pkey)
            throw .invalidEncoding("public key", "only RSA and EC keys are supported")
        }
    }

    deinit { EVP_PKEY_free(pkey) }

    /// The key of a PEM certificate (`-----BEGIN CERTIFICATE-----`), as Google publishes
    /// Firebase's token keys, or of a PEM public key (`-----BEGIN PUBLIC KEY-----`).
    convenience init(pem: String) throws(CryptoError) {
        let bytes = Array(pem.utf8)
        let key: OpaquePointer? = withMemoryBIO(bytes) { bio in
            if pem.contains("BEGIN CERTIFICATE") {
                guard let cert = PEM_read_bio_X509(bio, nil, nil, nil) else { return nil }
                defer { X509_free(cert) }
                return X509_get_pubkey(cert)
            }
            return PEM_read_bio_PUBKEY(bio, nil, nil, nil)
        }
        guard let key else { throw .openSSL("PEM_read_bio") }
        try self.init(owning: key)
    }

    /// The key of a DER certificate (as in a JWS `x5c` chain).
    convenience init(certificateDER der: [UInt8]) throws(CryptoError) {
        let key: OpaquePointer? = der.withUnsafeBufferPointer { buffer in
            var cursor: UnsafePointer<UInt8>? = buffer.baseAddress
            guard let cert = d2i_X509(nil, &cursor, buffer.count) else { return nil }
            defer { X509_free(cert) }
            return X509_get_pubkey(cert)
        }
        guard let key else { throw .openSSL("d2i_X509") }
        try self.init(owning: key)
    }

    /// An RSA key from a JWK's `n` and `e` (big-endian magnitudes).
    convenience init(rsaModulus n: [UInt8], exponent e: [UInt8]) throws(CryptoError) {
        // OSSL_PARAM_BLD_push_BN keeps a pointer, not a copy: the BIGNUMs must outlive
        // OSSL_PARAM_BLD_to_param, which `fromData` calls after this closure returns.
        let bn = BN_bin2bn(n, Int32(n.count), nil)
        let be = BN_bin2bn(e, Int32(e.count), nil)
        defer {
            BN_free(bn)
            BN_free(be)
        }
        let key = try PublicKey.fromData(type: "RSA") { builder in
            bn != nil && be != nil
                && OSSL_PARAM_BLD_push_BN(builder, staticCString("n"), bn) == 1
                && OSSL_PARAM_BLD_push_BN(builder, staticCString("e"), be) == 1
        }
        try self.init(owning: key)
    }

    /// An EC key on `curve` (OpenSSL name, `prime256v1` for P-256) from a JWK's `x` and `y`.
    convenience init(ecCurve curve: String, x: [UInt8], y: [UInt8]) throws(CryptoError) {
        guard x.count == y.count, !x.isEmpty else { throw .invalidEncoding("EC JWK", "x and y differ in length") }
        let point: [UInt8] = [0x04] + x + y
        // The builder keeps pointers to the strings, not copies: both buffers stay pinned
        // until `fromData` has called OSSL_PARAM_BLD_to_param.
        var built: Result<OpaquePointer, CryptoError> = .failure(.openSSL("EVP_PKEY_fromdata"))
        point.withUnsafeBufferPointer { pointBuffer in
            curve.withCString { curveName in
                do throws(CryptoError) {
                    built = .success(
                        try PublicKey.fromData(type: "EC") { builder in
                            OSSL_PARAM_BLD_push_utf8_string(builder, staticCString("group"), curveName, 0) == 1
                                && OSSL_PARAM_BLD_push_octet_string(builder, staticCString("pub"), pointBuffer.baseAddress, pointBuffer.count) == 1
                        })
                } catch {
                    built = .failure(error)
                }
            }
        }
        let key = try built.get()
        try self.init(owning: key)
    }

    private static func fromData(type: String, _ fill: (OpaquePointer) -> Bool) throws(CryptoError) -> OpaquePointer {
        guard let builder = OSSL_PARAM_BLD_new() else { throw .openSSL("OSSL_PARAM_BLD_new") }
        defer { OSSL_PARAM_BLD_free(builder) }
        guard fill(builder), let params = OSSL_PARAM_BLD_to_param(builder) else { throw .openSSL("OSSL_PARAM_BLD") }
        defer { OSSL_PARAM_free(params) }
        guard let ctx = EVP_PKEY_CTX_new_from_name(nil, type, nil) else { throw .openSSL("EVP_PKEY_CTX_new_from_name") }
        defer { EVP_PKEY_CTX_free(ctx) }
        var key: OpaquePointer?
        guard EVP_PKEY_fromdata_init(ctx) == 1,
            EVP_PKEY_fromdata(ctx, &key, copenssl_selection_public_key(), params) == 1, let key
        else {
            throw .openSSL("EVP_PKEY_fromdata")
        }
        return key
    }

    /// Verifies `signature` (DER for ECDSA, PKCS#1 v1.5 for RSA) over SHA-256 of `message`.
    func verifySHA256(signature: [UInt8], message: some Collection<UInt8>) -> Bool {
        guard let ctx = EVP_MD_CTX_new() else { return false }
        defer {
            EVP_MD_CTX_free(ctx)
            ERR_clear_error()  // a failed verification leaves entries we do not report
        }
        guard EVP_DigestVerifyInit(ctx, nil, EVP_sha256(), nil, pkey) == 1 else { return false }
        return withContiguousBytes(message) { m in
            EVP_DigestVerify(ctx, signature, signature.count, m.baseAddress, m.count) == 1
        }
    }

    /// The JWK members of this key (`kty`, `n`/`e` or `crv`/`x`/`y`), for publishing a key set.
    func jwk() throws(CryptoError) -> JSONObject {
        switch kind {
        case .rsa:
            return ["kty": "RSA", "n": .string(Base64URL.encode(try bnParam("n"))), "e": .string(Base64URL.encode(try bnParam("e")))]
        case .ec(let curve):
            guard curve == "prime256v1" else { throw .invalidEncoding("JWK", "only P-256 is exported") }
            var point = [UInt8](repeating: 0, count: 133)
            var length = 0
            guard EVP_PKEY_get_octet_string_param(pkey, "pub", &point, point.count, &length) == 1, length == 65 else {
                throw .openSSL("EVP_PKEY_get_octet_string_param")
            }
            return ["kty": "EC", "crv": "P-256", "x": .string(Base64URL.encode(point[1..<33])), "y": .string(Base64URL.encode(point[33..<65]))]
        }
    }

    private func bnParam(_ name: String) throws(CryptoError) -> [UInt8] {
        var bn: OpaquePointer?
        guard EVP_PKEY_get_bn_param(pkey, name, &bn) == 1, let bn else { throw .openSSL("EVP_PKEY_get_bn_param") }
        defer { BN_free(bn) }
        var out = [UInt8](repeating: 0, count: Int((BN_num_bits(bn) + 7) / 8))
        BN_bn2bin(bn, &out)
        return out
    }
}

/// OSSL_PARAM_BLD stores parameter *names* by reference until OSSL_PARAM_BLD_to_param, so
/// they must not be Swift's temporary C strings: a static literal has a stable address.
private func staticCString(_ name: StaticString) -> UnsafePointer<CChar> {
    UnsafeRawPointer(name.utf8Start).assumingMemoryBound(to: CChar.self)
}

/// Runs `body` with a read-only memory BIO over `bytes`.
func withMemoryBIO<T>(_ bytes: [UInt8], _ body: (OpaquePointer) -> T?) -> T? {
    bytes.withUnsafeBytes { raw -> T? in
        guard let bio = BIO_new_mem_buf(raw.baseAddress, Int32(raw.count)) else { return nil }
        defer { BIO_free(bio) }
        return body(bio)
    }
}
