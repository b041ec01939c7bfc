/// An operator grant (`billing_grants`): a tier for a user over a window, an overlay on the
/// store tier that never replaces it (SPEC §6).
struct Grant: Sendable, Equatable {
    enum Status: String, Sendable {
        case active = "Active", scheduled = "Scheduled", expired = "Expired", revoked = "Revoked"
    }

    var id: UInt64
    var userId: String
    var tier: Tier
    var startsAt: Timestamp
    /// nil: permanent.
    var expiresAt: Timestamp?
    var reason: String
    var campaign: String?
    var idempotencyKey: String
    var grantedBy: String
    var createdAt: Timestamp
    var revokedAt: Timestamp?
    var revokedBy: String?
    var revokeReason: String?

    init(
        id: UInt64, userId: String, tier: Tier, startsAt: Timestamp, expiresAt: Timestamp?, reason: String,
        campaign: String?, idempotencyKey: String, grantedBy: String, createdAt: Timestamp,
        revokedAt: Timestamp? = nil, revokedBy: String? = nil, revokeReason: String? = nil
    ) {
        self.id = id
        self.userId = userId
        self.tier = tier
        self.startsAt = startsAt
        self.expiresAt = expiresAt
        self.reason = reason
        self.campaign = campaign
        self.idempotencyKey = idempotencyKey
        self.grantedBy = grantedBy
        self.createdAt = createdAt
        self.revokedAt = revokedAt
        self.revokedBy = revokedBy
        self.revokeReason = revokeReason
    }

    /// The status at `now`. A revocation wins over everything; then the window decides
    /// (start inclusive, expiry exclusive, as the store's expiry).
    func status(at now: Timestamp) -> Status {
        if revokedAt != nil { return .revoked }
        if now < startsAt { return .scheduled }
        if let expiresAt, now >= expiresAt { return .expired }
        return .active
    }

    /// The access source this grant contributes at `now`, nil unless active.
    func source(at now: Timestamp) -> AccessSnapshot.AccessSource? {
        guard status(at: now) == .active else { return nil }
        return AccessSnapshot.AccessSource(tier: tier, kind: "grant", expiresAt: expiresAt, campaign: campaign)
    }

    func json(at now: Timestamp) -> JSON {
        [
            "grantId": .int(Int64(id)),
            "userId": .string(userId),
            "tier": .string(tier.rawValue),
            "status": .string(status(at: now).rawValue),
            "startsAt": .string(startsAt.iso8601),
            "expiresAt": JSON(expiresAt?.iso8601),
            "reason": .string(reason),
            "campaign": JSON(campaign),
            "idempotencyKey": .string(idempotencyKey),
            "grantedBy": .string(grantedBy),
            "createdAt": .string(createdAt.iso8601),
            "revokedAt": JSON(revokedAt?.iso8601),
            "revokedBy": JSON(revokedBy),
            "revokeReason": JSON(revokeReason),
        ]
    }
}

/// What `grants.create` asks for, before it has an id.
struct GrantRequest: Sendable, Equatable {
    var userId: String
    var tier: Tier
    /// nil: from the moment of creation.
    var startsAt: Timestamp?
    var expiresAt: Timestamp?
    var reason: String
    var campaign: String?
    var idempotencyKey: String

    init(
        userId: String, tier: Tier, startsAt: Timestamp?, expiresAt: Timestamp?, reason: String,
        campaign: String?, idempotencyKey: String
    ) {
        self.userId = userId
        self.tier = tier
        self.startsAt = startsAt
        self.expiresAt = expiresAt
        self.reason = reason
        self.campaign = campaign
        self.idempotencyKey = idempotencyKey
    }

    /// SHA-256 of the params as sent (an absent startsAt stays absent, so a retry hours
    /// later still matches): stored with the grant to tell a retry from a reused key.
    var fingerprint: String {
        let canonical: JSON = [
            "tier": .string(tier.rawValue),
            "startsAt": JSON(startsAt?.iso8601),
            "expiresAt": JSON(expiresAt?.iso8601),
            "reason": .string(reason),
            "campaign": JSON(campaign),
        ]
        return SHA256.hexHash(Array(canonical.serializedString().utf8))
    }
}
