/// Standard Webhooks signing (standardwebhooks.com, "Symmetric signatures"): the signature
/// of a message is `v1,` and the base64 HMAC-SHA256, under the secret's bytes, of
/// `{webhook-id}.{webhook-timestamp}.{body}`. A secret is written `whsec_` and the base64 of
/// its bytes (24 to 64 of them), so a receiver verifies with the specification's own
/// libraries (`standardwebhooks` on PyPI, npm, …).
struct WebhookSignature: Sendable {
    static let secretPrefix = "whsec_"
    private let key: [UInt8]

    /// nil when `secret` is not `whsec_` and the base64 of 24 to 64 bytes.
    init?(secret: String) {
        guard secret.hasPrefix(Self.secretPrefix),
            let key = try? Base64.decode(String(secret.dropFirst(Self.secretPrefix.count))), (24...64).contains(key.count)
        else { return nil }
        self.key = key
    }

    /// The `webhook-signature` header's value for one attempt.
    func signature(id: String, timestamp: Int64, body: [UInt8]) throws(CryptoError) -> String {
        let message = Array("\(id).\(timestamp).".utf8) + body
        return "v1," + Base64.encode(try HMACSHA256.authenticationCode(key: key, message: message))
    }

    /// A new secret of 32 random bytes, written the way endpoints are configured.
    static func generateSecret() throws(CryptoError) -> String {
        secretPrefix + Base64.encode(try SecureRandom.bytes(32))
    }
}
