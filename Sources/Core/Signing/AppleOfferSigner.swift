/// What StoreKit needs the server to sign with the In-App Purchase key (SPEC §17), as Apple's
/// app-store-server-library signs it (`PromotionalOfferV2SignatureCreator`,
/// `IntroductoryOfferEligibilitySignatureCreator`, `PromotionalOfferSignatureCreator`):
///
/// - a promotional offer, version 2: a JWS, header `{alg: ES256, typ: JWT, kid: keyId}`,
///   claims `productId`, `offerIdentifier`, `transactionId` (when one is known), `bid`,
///   `iss` (the issuer id), `aud` `promotional-offer`, `iat` (seconds) and `nonce` (a fresh
///   UUID);
/// - introductory-offer eligibility: the same JWS with `aud`
///   `introductory-offer-eligibility` and `productId`, `allowIntroductoryOffer`,
///   `transactionId` (required);
/// - a promotional offer, version 1 (the original StoreKit API's `SKPaymentDiscount`): ECDSA
///   SHA-256 over `bundleId ⁣ keyId ⁣ productId ⁣ offerId ⁣ applicationUsername ⁣ nonce ⁣
///   timestamp` joined by U+2063, base64 of the DER signature.
struct AppleOfferSigner: Sendable {
    static let promotionalAudience = "promotional-offer"
    static let introductoryAudience = "introductory-offer-eligibility"

    let issuerId: String
    let keyId: String
    let bundleId: String
    let key: PrivateKey

    /// `apple.inAppKey`, else the key of `apple.serverApi`; nil when neither is set or
    /// `apple.bundleId` is not (the route then answers 501).
    static func load(_ apple: BillingConfiguration.Apple) throws(ConfigurationError) -> AppleOfferSigner? {
        guard let bundleId = apple.bundleId, !bundleId.isEmpty else { return nil }
        if apple.inAppKey.isConfigured, let issuerId = apple.inAppKey.issuerId, let keyId = apple.inAppKey.keyId,
            let pem = apple.inAppKey.privateKey
        {
            return AppleOfferSigner(
                issuerId: issuerId, keyId: keyId, bundleId: bundleId, key: try PrivateKey.p256(pem: pem, setting: "apple.inAppKey.privateKey"))
        }
        if apple.serverApi.isConfigured, let issuerId = apple.serverApi.issuerId, let keyId = apple.serverApi.keyId,
            let pem = apple.serverApi.privateKey
        {
            return AppleOfferSigner(
                issuerId: issuerId, keyId: keyId, bundleId: bundleId, key: try PrivateKey.p256(pem: pem, setting: "apple.serverApi.privateKey"))
        }
        return nil
    }

    /// The claims of a version-2 signature for `audience`.
    func claims(audience: String, _ specific: JSONObject, now: Timestamp, nonce: String) -> JSON {
        var claims = specific
        claims["bid"] = .string(bundleId)
        claims["iss"] = .string(issuerId)
        claims["aud"] = .string(audience)
        claims["iat"] = .int(now.secondsSinceEpoch)
        claims["nonce"] = .string(nonce)
        return .object(claims)
    }

    func promotionalOffer(productId: String, offerIdentifier: String, transactionId: String?, now: Timestamp) throws(CryptoError) -> String {
        var specific: JSONObject = ["productId": .string(productId), "offerIdentifier": .string(offerIdentifier)]
        if let transactionId { specific["transactionId"] = .string(transactionId) }
        return try sign(claims(audience: Self.promotionalAudience, specific, now: now, nonce: try Self.nonce()))
    }

    func introductoryOfferEligibility(productId: String, allow: Bool, transactionId: String, now: Timestamp) throws(CryptoError) -> String {
        let specific: JSONObject = [
            "productId": .string(productId), "allowIntroductoryOffer": .bool(allow), "transactionId": .string(transactionId),
        ]
        return try sign(claims(audience: Self.introductoryAudience, specific, now: now, nonce: try Self.nonce()))
    }

    /// A version-1 signature: `(signature, nonce, timestamp)`, the timestamp in milliseconds
    /// (Apple keeps the offer redeemable 24 hours from it).
    func legacyPromotionalOffer(productId: String, offerIdentifier: String, applicationUsername: String, now: Timestamp)
        throws(CryptoError) -> (signature: String, nonce: String, timestamp: Int64)
    {
        let nonce = try Self.nonce()
        let timestamp = now.millisecondsSinceEpoch
        let payload = Self.legacyPayload(
            bundleId: bundleId, keyId: keyId, productId: productId, offerIdentifier: offerIdentifier,
            applicationUsername: applicationUsername, nonce: nonce, timestamp: timestamp)
        return (Base64.encode(try key.signSHA256(Array(payload.utf8))), nonce, timestamp)
    }

    /// What a version-1 signature signs; the user name and nonce lowercased, as Apple's.
    static func legacyPayload(
        bundleId: String, keyId: String, productId: String, offerIdentifier: String, applicationUsername: String, nonce: String,
        timestamp: Int64
    ) -> String {
        [bundleId, keyId, productId, offerIdentifier, applicationUsername.lowercased(), nonce.lowercased(), String(timestamp)]
            .joined(separator: "\u{2063}")
    }

    private func sign(_ claims: JSON) throws(CryptoError) -> String {
        try CompactJWS.sign(payload: claims, header: ["kid": .string(keyId)], key: key, algorithm: "ES256")
    }

    /// A random (version 4) UUID, lowercase.
    static func nonce() throws(CryptoError) -> String {
        var bytes = try SecureRandom.bytes(16)
        bytes[6] = (bytes[6] & 0x0F) | 0x40
        bytes[8] = (bytes[8] & 0x3F) | 0x80
        let hex = Hex.encode(bytes)
        let chars = Array(hex)
        func part(_ range: Range<Int>) -> String { String(chars[range]) }
        return [part(0..<8), part(8..<12), part(12..<16), part(16..<20), part(20..<32)].joined(separator: "-")
    }
}
