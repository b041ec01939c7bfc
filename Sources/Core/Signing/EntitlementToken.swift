/// The entitlement token (SPEC §17): `signedSnapshot` of `GET /billing/access?signed=true`,
/// a compact JWS (ES256, header `kid`) the app keeps for an outage and the team's services
/// check without calling billing, with any JOSE library and the keys of `GET
/// /billing/keys`.
///
/// Claims: `iss` (`entitlements.issuer`), `sub` (the user id), `tier`, `phase` and
/// `capabilities` as the snapshot says them, `expiresAt` (the end of the access at that tier:
/// the latest end among the sources granting it; null when one of them has none, or the tier
/// is free), `validUntil` (the earlier of `expiresAt` and now + `entitlements.offlineSeconds`),
/// `revision` (the snapshot's: a newer token of the same user has a higher one), and the
/// registered `iat` and `exp` (NumericDate seconds; `exp` is `validUntil` rounded down, so a
/// standard library refuses the token once it lapsed). The times the snapshot writes as
/// ISO-8601 are written so here too.
struct EntitlementTokenSigner: Sendable {
    let keys: SigningKeyRing
    let issuer: String
    let offlineSeconds: Int64

    init(keys: SigningKeyRing, issuer: String, offlineSeconds: Int) {
        self.keys = keys
        self.issuer = issuer
        self.offlineSeconds = Int64(offlineSeconds)
    }

    /// nil without `entitlements.signingKeyFiles`; a key file that cannot be used is a
    /// start-up error.
    static func load(_ configuration: BillingConfiguration.Entitlements) throws(ConfigurationError) -> EntitlementTokenSigner? {
        guard configuration.isEnabled else { return nil }
        return EntitlementTokenSigner(
            keys: try SigningKeyRing(paths: configuration.signingKeyFiles), issuer: configuration.issuer,
            offlineSeconds: configuration.offlineSeconds)
    }

    /// When access at the snapshot's tier ends: nil for a tier without end (or free).
    static func accessEnd(_ snapshot: AccessSnapshot) -> Timestamp? {
        let granting = snapshot.sources.filter { $0.tier == snapshot.tier }
        guard snapshot.tier != .free, !granting.isEmpty else { return nil }
        var end: Timestamp?
        for source in granting {
            guard let expiresAt = source.expiresAt else { return nil }
            end = end.map { max($0, expiresAt) } ?? expiresAt
        }
        return end
    }

    func claims(_ snapshot: AccessSnapshot) -> JSON {
        let now = snapshot.serverTime
        let end = Self.accessEnd(snapshot)
        let offline = now.adding(seconds: offlineSeconds)
        let validUntil = end.map { min($0, offline) } ?? offline
        return [
            "iss": .string(issuer),
            "sub": .string(snapshot.userId),
            "tier": .string(snapshot.tier.rawValue),
            "phase": .string(snapshot.phase.rawValue),
            "capabilities": .array((snapshot.quota?.capabilities ?? []).map(JSON.string)),
            "expiresAt": JSON(end?.iso8601),
            "validUntil": .string(validUntil.iso8601),
            "revision": .int(Int64(snapshot.revision)),
            "iat": .int(now.secondsSinceEpoch),
            "exp": .int(validUntil.secondsSinceEpoch),
        ]
    }

    /// The token, signed by the first key in force.
    func sign(_ snapshot: AccessSnapshot) throws(CryptoError) -> String {
        let key = keys.current().signing
        return try CompactJWS.sign(payload: claims(snapshot), header: ["kid": .string(key.kid)], key: key.key, algorithm: "ES256")
    }
}

/// `GET /api/v1/billing/keys` (no authentication): every key of
/// `entitlements.signingKeyFiles` as a JWKS (the signing key first), for whoever verifies an
/// entitlement token. Cacheable for five minutes: a key is published before it signs (SPEC
/// §17's rotation), so a verifier that fetches on an unknown `kid` always finds it.
struct SigningKeysRoute: Sendable {
    let signer: EntitlementTokenSigner?
    static let maxAgeSeconds = 300

    func handle(_ request: HTTPRequest, _ context: some RequestContextProtocol) throws -> HTTPResponse {
        guard let signer else {
            throw APIError.notConfigured("entitlement tokens are not configured (entitlements.signingKeyFiles)")
        }
        return HTTPResponse(
            status: .ok,
            headers: ["Content-Type": "application/jwk-set+json", "Cache-Control": "public, max-age=\(Self.maxAgeSeconds)"],
            body: signer.keys.current().jwks.serialized())
    }
}
