import COpenSSL

/// Verifies App Store signed data (SPEC §5, seeds/002, seeds/004) with OpenSSL only.
///
/// A compact JWS is accepted only when: it has three base64url segments whose header and
/// payload are JSON objects; `alg` is exactly ES256; `x5c` holds exactly three padded base64
/// DER certificates; leaf → intermediate verifies, in OpenSSL's strict mode
/// (`X509_V_FLAG_X509_STRICT`) and at the payload's `signedDate`, up to one of the
/// *configured* roots — the header's own third certificate is parsed but never trusted nor
/// even offered as an untrusted chain element; the verified chain's intermediate carries
/// OID 1.2.840.113635.100.6.2.1 and its leaf 1.2.840.113635.100.6.11.1; the leaf key is EC
/// P-256; and the raw `r‖s` signature, converted to DER, verifies over the signing input.
/// Then the typed entry points check `bundleId`, `appAppleId` (notifications in Production,
/// when configured) and `environment` against `apple.*`.
///
/// The same rules as Apple's `SignedDataVerifier` with online checks off (the test suite
/// asserts it on a corpus), with one deliberate difference: the third `x5c` entry must be a
/// readable certificate too (Apple's library ignores it).
struct AppleSignedDataVerifier: Sendable {
    /// DER of each configured root.
    let rootCertificates: [[UInt8]]
    let bundleId: String
    let appAppleId: Int64?
    /// Accepted `environment` values, as Apple spells them (`Production`, `Sandbox`).
    let environments: [String]

    static let intermediateOID = "1.2.840.113635.100.6.2.1"
    static let leafOID = "1.2.840.113635.100.6.11.1"
    /// A notification with both nested JWS is ~20 KB; far more is not App Store data.
    static let maxBytes = 256 * 1024

    init(rootCertificates: [[UInt8]], bundleId: String, appAppleId: Int64?, environments: [String]) {
        self.rootCertificates = rootCertificates
        self.bundleId = bundleId
        self.appAppleId = appAppleId
        self.environments = environments
    }

    /// The verifier `apple.*` describes; nil when App Store is not configured (no root or no
    /// bundle id: the routes answer 501). An unreadable root file is a start-up error.
    static func load(_ apple: BillingConfiguration.Apple) throws(ConfigurationError) -> AppleSignedDataVerifier? {
        guard let bundleId = apple.bundleId, !bundleId.isEmpty, !apple.trustedRootsFiles.isEmpty else { return nil }
        var roots: [[UInt8]] = []
        for path in apple.trustedRootsFiles {
            let bytes: [UInt8]
            do { bytes = try FileIO.read(path, maxBytes: 1 << 20) } catch { throw ConfigurationError("apple.trustedRootsFiles: \(error)") }
            guard let der = certificateDER(fileBytes: bytes) else {
                throw ConfigurationError("apple.trustedRootsFiles: \(path) is not a DER or PEM certificate")
            }
            roots.append(der)
        }
        return AppleSignedDataVerifier(
            rootCertificates: roots, bundleId: bundleId, appAppleId: apple.appAppleId,
            environments: apple.environments)
    }

    /// DER bytes of a DER or PEM certificate file.
    static func certificateDER(fileBytes: [UInt8]) -> [UInt8]? {
        if let cert = X509Certificate(der: fileBytes) { return cert.der() }
        let pem: OpaquePointer? = withMemoryBIO(fileBytes) { PEM_read_bio_X509($0, nil, nil, nil) }
        guard let pem else {
            _ = drainOpenSSLErrors()
            return nil
        }
        return X509Certificate(owning: pem).der()
    }

    /// The JWS text of `field` in a request body: a non-empty string (else 400), at most
    /// `maxBytes` (else 413: longer than any App Store data, it can never verify). Both routes
    /// read their signed data through it, so both answer alike.
    static func signedData(_ body: JSON, field: String) throws -> String {
        let jws = try PayloadReader(body, path: "").requiredString(field, maxLength: .max)
        guard jws.utf8.count <= maxBytes else {
            throw PayloadError(field, "longer than \(maxBytes) bytes", tooLarge: true)
        }
        return jws
    }

    // MARK: typed entry points

    /// A StoreKit 2 transaction (`JWSTransaction`): signature, then `bundleId` and `environment`.
    func verifyTransaction(_ jws: String, now: Timestamp) throws(AppleVerificationError) -> JSON {
        let payload = try verifySignedData(jws, now: now)
        guard payload["bundleId"]?.stringValue == bundleId else { throw AppleVerificationError(.bundleMismatch) }
        try checkEnvironment(payload["environment"])
        return payload
    }

    /// Renewal info (`JWSRenewalInfo`): signature, then `environment` (it carries no bundle id).
    func verifyRenewalInfo(_ jws: String, now: Timestamp) throws(AppleVerificationError) -> JSON {
        let payload = try verifySignedData(jws, now: now)
        try checkEnvironment(payload["environment"])
        return payload
    }

    /// The members of a notification payload that name the app, in Apple's order (its
    /// library's `verify_and_decode_notification`): exactly one is present.
    static let notificationSections = ["data", "summary", "externalPurchaseToken", "appData"]

    /// A notification's `signedPayload`: signature; then, since any Apple-signed JWS would
    /// pass that far, it must be a notification (`notificationType` and `notificationUUID`
    /// strings: a transaction or renewal-info JWS is refused as `not_a_notification`, 400,
    /// and never stored); then the app identity and environment of its section (SPEC §15):
    /// `data`, `summary` and `appData` carry `bundleId`, `appAppleId` and `environment`;
    /// `externalPurchaseToken` carries no environment (an `externalPurchaseId` starting with
    /// `SANDBOX` is a sandbox token, as Apple's library decides). A section of a later type,
    /// unknown here, is checked the same way when it names a bundle id; a notification naming
    /// no app at all is refused as a bundle mismatch, as Apple's library refuses it. A
    /// setting mismatch carries the notification's identity (`notificationUUID`, type).
    func verifyNotification(_ jws: String, now: Timestamp) throws(AppleVerificationError) -> JSON {
        let payload = try verifySignedData(jws, now: now)
        guard let uuid = payload["notificationUUID"]?.stringValue, let type = payload["notificationType"]?.stringValue else {
            throw AppleVerificationError(.notANotification, "no notificationType or notificationUUID")
        }
        do {
            try checkNotificationApp(payload)
        } catch var error {
            error.notificationUUID = uuid
            error.notificationType = type
            throw error
        }
        return payload
    }

    private func checkNotificationApp(_ payload: JSON) throws(AppleVerificationError) {
        let known = Self.notificationSections.lazy.compactMap { name in payload[name]?.objectValue.map { (name, $0) } }.first
        let later = payload.objectValue?.lazy.compactMap { member -> (String, JSONObject)? in
            guard let object = member.value.objectValue, object["bundleId"] != nil else { return nil }
            return (member.key, object)
        }.first
        guard let (name, section) = known ?? later else { throw AppleVerificationError(.bundleMismatch, "no app section") }
        guard section["bundleId"]?.stringValue == bundleId else { throw AppleVerificationError(.bundleMismatch) }
        let environment: String?
        if name == "externalPurchaseToken" {
            environment = (section["externalPurchaseId"]?.stringValue ?? "").hasPrefix("SANDBOX") ? "Sandbox" : "Production"
        } else {
            environment = section["environment"]?.stringValue
        }
        if environment == "Production", let appAppleId {
            guard section["appAppleId"]?.int64Value == appAppleId else { throw AppleVerificationError(.appAppleIdMismatch) }
        }
        try checkEnvironment(environment.map(JSON.string))
    }

    /// The environment a verified notification payload is of (as `verifyNotification` read it).
    static func notificationEnvironment(_ payload: JSON) -> StoreEnvironment {
        if let token = payload["externalPurchaseToken"]?.objectValue {
            return (token["externalPurchaseId"]?.stringValue ?? "").hasPrefix("SANDBOX") ? .sandbox : .production
        }
        let section = notificationSections.lazy.compactMap { payload[$0]?.objectValue }.first
        return section?["environment"]?.stringValue == "Sandbox" ? .sandbox : .production
    }

    private func checkEnvironment(_ value: JSON?) throws(AppleVerificationError) {
        guard let environment = value?.stringValue, environments.contains(environment) else {
            throw AppleVerificationError(.environmentNotAccepted)
        }
    }

    // MARK: the JWS itself

    /// `jws` split and decoded, not verified: three non-empty base64url segments whose header
    /// and payload are JSON objects, at most `maxBytes`; else `.malformed`. What is not even
    /// this can never be App Store data, whatever the trust settings.
    static func compactJWS(_ jws: String) throws(AppleVerificationError) -> CompactJWS {
        do { return try CompactJWS.parse(jws, maxBytes: maxBytes) } catch {
            throw AppleVerificationError(.malformed, error.reason)
        }
    }

    /// Verifies the JWS's chain and signature and returns its payload (an object).
    /// `now` is the verification time only when the payload has no `signedDate`.
    func verifySignedData(_ jws: String, now: Timestamp) throws(AppleVerificationError) -> JSON {
        guard !rootCertificates.isEmpty else { throw AppleVerificationError(.notConfigured) }
        let parsed = try Self.compactJWS(jws)
        guard let x5c = parsed.header["x5c"]?.arrayValue, !x5c.isEmpty else {
            throw AppleVerificationError(.invalidChainLength, "x5c missing")
        }
        guard parsed.algorithm == "ES256" else { throw AppleVerificationError(.unsupportedAlgorithm) }
        guard x5c.count == 3 else { throw AppleVerificationError(.invalidChainLength, "x5c has \(x5c.count) entries") }
        var certificates: [X509Certificate] = []
        for entry in x5c {
            guard let text = entry.stringValue, text.utf8.count % 4 == 0, let der = try? Base64.decode(text),
                let cert = X509Certificate(der: der)
            else {
                throw AppleVerificationError(.invalidCertificate, "x5c entry is not base64 DER")
            }
            certificates.append(cert)
        }
        // Apple's rule: the payload's own signing time, else now.
        let signedAt: Timestamp
        switch parsed.payload["signedDate"] ?? parsed.payload["receiptCreationDate"] {
        case nil, .null?: signedAt = now
        case let value?:
            guard let ms = value.int64Value else { throw AppleVerificationError(.malformed, "signedDate is not an integer") }
            signedAt = Timestamp(millisecondsSinceEpoch: ms)
        }
        let key = try verifyChain(leaf: certificates[0], intermediate: certificates[1], at: signedAt)
        guard key.kind == .ec(curve: "prime256v1") else { throw AppleVerificationError(.unexpectedKey) }
        // JOSE signs raw r‖s; OpenSSL verifies the DER ECDSA-Sig-Value.
        guard let der = try? ECDSASignature.derFromRaw(parsed.signature),
            key.verifySHA256(signature: der, message: parsed.signingInput)
        else {
            throw AppleVerificationError(.badSignature)
        }
        return parsed.payload
    }

    /// leaf → intermediate → configured root, strict, at `time`; returns the leaf's key.
    private func verifyChain(leaf: X509Certificate, intermediate: X509Certificate, at time: Timestamp) throws(AppleVerificationError) -> PublicKey {
        guard let store = X509_STORE_new() else { throw AppleVerificationError(.untrustedChain, "X509_STORE_new") }
        defer { X509_STORE_free(store) }
        for der in rootCertificates {
            guard let root = X509Certificate(der: der) else { continue }
            _ = root.withHandle { X509_STORE_add_cert(store, $0) }  // the store takes its own reference
        }
        guard let untrusted = copenssl_sk_X509_new_null() else { throw AppleVerificationError(.untrustedChain, "sk_X509_new_null") }
        defer { copenssl_sk_X509_free(untrusted) }  // the stack does not own its entries
        guard let ctx = X509_STORE_CTX_new() else { throw AppleVerificationError(.untrustedChain, "X509_STORE_CTX_new") }
        defer { X509_STORE_CTX_free(ctx) }

        // Only the intermediate is offered as untrusted: the header's root never enters.
        return try intermediate.withHandle { (intermediateHandle) throws(AppleVerificationError) -> PublicKey in
            try leaf.withHandle { (leafHandle) throws(AppleVerificationError) -> PublicKey in
                _ = copenssl_sk_X509_push(untrusted, intermediateHandle)
                guard X509_STORE_CTX_init(ctx, store, leafHandle, untrusted) == 1 else {
                    _ = drainOpenSSLErrors()
                    throw AppleVerificationError(.untrustedChain, "X509_STORE_CTX_init")
                }
                let param = X509_STORE_CTX_get0_param(ctx)
                X509_VERIFY_PARAM_set_flags(param, UInt(X509_V_FLAG_X509_STRICT))
                X509_VERIFY_PARAM_set_time(param, time_t(time.millisecondsSinceEpoch / 1000))
                guard X509_verify_cert(ctx) == 1 else {
                    let code = X509_STORE_CTX_get_error(ctx)
                    let detail = X509_verify_cert_error_string(Int(code)).map { String(cString: $0) } ?? "error \(code)"
                    _ = drainOpenSSLErrors()
                    throw AppleVerificationError(.untrustedChain, detail)
                }
                guard let chain = X509_STORE_CTX_get0_chain(ctx), copenssl_sk_X509_num(chain) >= 2,
                    let verifiedLeaf = copenssl_sk_X509_value(chain, 0),
                    let verifiedIntermediate = copenssl_sk_X509_value(chain, 1)
                else {
                    throw AppleVerificationError(.untrustedChain, "verified chain too short")
                }
                guard Self.hasExtension(verifiedLeaf, oid: Self.leafOID) else {
                    throw AppleVerificationError(.missingAppleOID, "leaf")
                }
                guard Self.hasExtension(verifiedIntermediate, oid: Self.intermediateOID) else {
                    throw AppleVerificationError(.missingAppleOID, "intermediate")
                }
                guard let pkey = X509_get_pubkey(leafHandle) else {
                    _ = drainOpenSSLErrors()
                    throw AppleVerificationError(.unexpectedKey)
                }
                do { return try PublicKey(owning: pkey) } catch { throw AppleVerificationError(.unexpectedKey) }
            }
        }
    }

    private static func hasExtension(_ cert: OpaquePointer, oid: String) -> Bool {
        guard let object = OBJ_txt2obj(oid, 1) else {
            _ = drainOpenSSLErrors()
            return false
        }
        defer { ASN1_OBJECT_free(object) }
        return X509_get_ext_by_OBJ(cert, object, -1) >= 0
    }
}
