/// `billing_grants` I/O: create (idempotent by the unique (user, key)), revoke, list.
enum GrantStore {
    static let columns = """
        g.id, g.user_id, g.tier, g.starts_at, g.expires_at, g.reason, g.campaign, g.idempotency_key, g.params_sha256,
        g.granted_by, g.created_at, g.revoked_at, g.revoked_by, g.revoke_reason
        """

    struct Created: Sendable, Equatable {
        var grant: Grant
        /// false when the key named an existing grant with the same params.
        var created: Bool
    }

    /// Creates the grant, or returns the one the key already names. The unique key decides
    /// under concurrency: a racing twin gets the duplicate-key error, then reads the winner.
    static func create(
        _ request: GrantRequest, actor: String, now: Timestamp,
        on db: DatabaseConnection
    ) throws -> Created {
        try db.transaction(retries: 3, isolation: .readCommitted) { db -> Created in
            if let existing = try find(userId: request.userId, idempotencyKey: request.idempotencyKey, on: db) {
                return try replay(existing, request)
            }
            guard try UserDirectory.knownUsers([request.userId], on: db).contains(request.userId) else {
                throw BillingError.notFound("user", ["userId": .string(request.userId)])
            }
            let startsAt = request.startsAt ?? now
            if let expiresAt = request.expiresAt, expiresAt <= startsAt {
                throw BillingError(.invalidParams, "\"expiresAt\" must be after startsAt", data: ["field": "expiresAt"])
            }
            // The user's access row first: the same lock order as the store fold.
            try UserLock.lock(request.userId, now: now, on: db)
            let id: UInt64
            do {
                let result = try db.execute(
                    """
                    INSERT INTO billing_grants (user_id, tier, starts_at, expires_at, reason, campaign, idempotency_key,
                      params_sha256, granted_by, created_at)
                    VALUES (\(request.userId), \(request.tier.rawValue), \(startsAt), \(request.expiresAt), \(request.reason),
                      \(request.campaign), \(request.idempotencyKey), \(request.fingerprint), \(actor), \(now))
                    """)
                id = result.lastInsertID
            } catch let error as DatabaseError where error.isDuplicateKey {
                guard let existing = try find(userId: request.userId, idempotencyKey: request.idempotencyKey, on: db) else { throw error }
                return try replay(existing, request)
            }
            try bumpRevision(userId: request.userId, now: now, on: db)
            guard let grant = try load(id: id, on: db)?.grant else { throw DatabaseError.misuse("grant vanished after insert") }
            try AuditLog.write(
                actor: actor, action: "grants.create", targetUserId: grant.userId, campaign: grant.campaign,
                detail: [
                    "grantId": .int(Int64(id)), "tier": .string(grant.tier.rawValue),
                    "startsAt": .string(grant.startsAt.iso8601), "expiresAt": JSON(grant.expiresAt?.iso8601),
                    "reason": .string(grant.reason), "idempotencyKey": .string(grant.idempotencyKey),
                ],
                now: now, on: db)
            return Created(grant: grant, created: true)
        }
    }

    private static func replay(_ existing: (grant: Grant, fingerprint: String), _ request: GrantRequest) throws -> Created {
        guard existing.fingerprint == request.fingerprint else {
            throw BillingError(
                .idempotencyMismatch, "idempotencyKey was already used for a grant with other params",
                data: [
                    "grantId": .int(Int64(existing.grant.id)), "idempotencyKey": .string(request.idempotencyKey),
                    "userId": .string(request.userId),
                ])
        }
        return Created(grant: existing.grant, created: false)
    }

    /// Revokes an active or scheduled grant. Revoking a revoked grant changes nothing and
    /// says so (`changed: false`).
    static func revoke(
        grantId: UInt64, actor: String, reason: String, now: Timestamp,
        on db: DatabaseConnection
    ) throws -> (grant: Grant, changed: Bool) {
        try db.transaction(retries: 3, isolation: .readCommitted) { db -> (grant: Grant, changed: Bool) in
            guard let before = try load(id: grantId, on: db)?.grant else {
                throw BillingError.notFound("grant", ["grantId": .int(Int64(grantId))])
            }
            if before.revokedAt != nil { return (before, false) }
            try UserLock.lock(before.userId, now: now, on: db)
            let result = try db.execute(
                """
                UPDATE billing_grants SET revoked_at = \(now), revoked_by = \(actor), revoke_reason = \(reason)
                WHERE id = \(grantId) AND revoked_at IS NULL
                """)
            guard let after = try load(id: grantId, on: db)?.grant else { throw DatabaseError.misuse("grant vanished") }
            guard result.affectedRows == 1 else { return (after, false) }
            try bumpRevision(userId: after.userId, now: now, on: db)
            try AuditLog.write(
                actor: actor, action: "grants.revoke", targetUserId: after.userId, campaign: after.campaign,
                detail: [
                    "grantId": .int(Int64(grantId)), "reason": .string(reason),
                    "statusBefore": .string(before.status(at: now).rawValue),
                ],
                now: now, on: db)
            return (after, true)
        }
    }

    /// Every grant of the user, newest first.
    static func list(userId: String, on db: DatabaseConnection) throws(DatabaseError) -> [Grant] {
        try db.query("SELECT \(unsafeRaw: columns) FROM billing_grants g WHERE g.user_id = \(userId) ORDER BY g.id DESC")
            .map { (row) throws(DatabaseError) -> Grant in try grant(row) }
    }

    static func find(userId: String, idempotencyKey: String, on db: DatabaseConnection) throws(DatabaseError) -> (grant: Grant, fingerprint: String)?
    {
        guard
            let row = try db.queryOne(
                """
                SELECT \(unsafeRaw: columns) FROM billing_grants g WHERE g.user_id = \(userId) AND g.idempotency_key = \(idempotencyKey)
                """)
        else { return nil }
        return (try grant(row), try row.string("params_sha256"))
    }

    static func load(id: UInt64, on db: DatabaseConnection) throws(DatabaseError) -> (grant: Grant, fingerprint: String)? {
        guard let row = try db.queryOne("SELECT \(unsafeRaw: columns) FROM billing_grants g WHERE g.id = \(id)") else { return nil }
        return (try grant(row), try row.string("params_sha256"))
    }

    static func grant(_ row: SQLRow) throws(DatabaseError) -> Grant {
        Grant(
            id: try row.uint64("id"), userId: try row.string("user_id"),
            tier: Tier(rawValue: try row.string("tier")) ?? .plus,
            startsAt: try row.timestamp("starts_at"), expiresAt: try row.optionalTimestamp("expires_at"),
            reason: try row.string("reason"), campaign: try row.optionalString("campaign"),
            idempotencyKey: try row.string("idempotency_key"), grantedBy: try row.string("granted_by"),
            createdAt: try row.timestamp("created_at"), revokedAt: try row.optionalTimestamp("revoked_at"),
            revokedBy: try row.optionalString("revoked_by"), revokeReason: try row.optionalString("revoke_reason"))
    }

    /// A change of an operator source is a change of the user's access: the snapshot's
    /// revision moves, as it does for a store change.
    static func bumpRevision(userId: String, now: Timestamp, on db: DatabaseConnection) throws(DatabaseError) {
        try db.execute("UPDATE billing_access SET revision = revision + 1, updated_at = \(now) WHERE user_id = \(userId)")
        try AccessOutbox.accessChanged(userId, now: now, on: db)
    }
}
