/// The bearer token of the App Store Server API: an ES256 JWT signed with the In-App
/// Purchase key (SPEC §11), header `{alg: ES256, kid, typ: JWT}`, claims `iss` (issuer id),
/// `iat`, `exp` (at most 60 minutes later: Apple refuses longer), `aud`
/// `appstoreconnect-v1` and `bid` (the bundle id). A fresh token per call: signing is
/// cheap and nothing long-lived sits in memory besides the key.
struct AppStoreServerAPIToken: Sendable {
    static let audience = "appstoreconnect-v1"
    static let maxLifetimeSeconds: Int64 = 3600

    let issuerId: String
    let keyId: String
    let bundleId: String
    let key: PrivateKey
    let lifetimeSeconds: Int64

    /// The key must be EC P-256 (an App Store Connect `.p8`); anything else is a
    /// configuration error, found at start-up.
    init(
        issuerId: String, keyId: String, bundleId: String, privateKeyPEM: String,
        lifetimeSeconds: Int
    ) throws(ConfigurationError) {
        let key = try PrivateKey.p256(pem: privateKeyPEM, setting: "apple.serverApi.privateKey")
        self.issuerId = issuerId
        self.keyId = keyId
        self.bundleId = bundleId
        self.key = key
        self.lifetimeSeconds = min(Int64(lifetimeSeconds), Self.maxLifetimeSeconds)
    }

    func claims(now: Timestamp) -> JSON {
        let issuedAt = now.secondsSinceEpoch
        return [
            "iss": .string(issuerId), "iat": .int(issuedAt), "exp": .int(issuedAt + lifetimeSeconds),
            "aud": .string(Self.audience), "bid": .string(bundleId),
        ]
    }

    func make(now: Timestamp) throws(CryptoError) -> String {
        try CompactJWS.sign(payload: claims(now: now), header: ["kid": .string(keyId)], key: key, algorithm: "ES256")
    }
}
