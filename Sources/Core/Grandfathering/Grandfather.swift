/// Grandfather campaigns (`billing_campaigns`, `billing_campaign_members`): a tier given to a
/// cohort of users (by sign-up date) or to hand-picked users, one membership per (campaign,
/// user) by the primary key, every membership audited. An overlay like a grant: it never
/// demotes a paying user because the snapshot takes the highest active source.
enum Grandfather {
    struct Campaign: Sendable, Equatable {
        var name: String
        var tier: Tier
        var expiresAt: Timestamp?
        var reason: String
        var createdBy: String
        var createdAt: Timestamp
        var revokedAt: Timestamp?
        var revokedBy: String?

        /// Whether its members have access at `now`.
        func isActive(at now: Timestamp) -> Bool {
            revokedAt == nil && (expiresAt.map { now < $0 } ?? true)
        }

        func json(at now: Timestamp) -> JSON {
            [
                "campaign": .string(name), "tier": .string(tier.rawValue), "expiresAt": JSON(expiresAt?.iso8601),
                "reason": .string(reason), "createdBy": .string(createdBy), "createdAt": .string(createdAt.iso8601),
                "revokedAt": JSON(revokedAt?.iso8601), "revokedBy": JSON(revokedBy), "active": .bool(isActive(at: now)),
            ]
        }
    }

    /// What a campaign run asks for.
    struct Definition: Sendable, Equatable {
        var campaign: String
        var tier: Tier
        var expiresAt: Timestamp?
        var reason: String

        init(campaign: String, tier: Tier, expiresAt: Timestamp?, reason: String) {
            self.campaign = campaign
            self.tier = tier
            self.expiresAt = expiresAt
            self.reason = reason
        }
    }

    /// Users created in [from, before), in (created_at, id) order: the order the cursor walks.
    struct Cohort: Sendable, Equatable {
        var createdFrom: Timestamp?
        var createdBefore: Timestamp

        init(createdFrom: Timestamp?, createdBefore: Timestamp) {
            self.createdFrom = createdFrom
            self.createdBefore = createdBefore
        }
    }

    /// A position in the cohort: the last user handled. Opaque on the wire (`<ms>:<id>`).
    struct Cursor: Sendable, Equatable {
        var createdAt: Timestamp
        var userId: String

        init(createdAt: Timestamp, userId: String) {
            self.createdAt = createdAt
            self.userId = userId
        }

        init?(_ text: String) {
            guard let colon = text.firstIndex(of: ":"), let ms = Int64(text[..<colon]) else { return nil }
            let id = String(text[text.index(after: colon)...])
            guard !id.isEmpty else { return nil }
            self.init(createdAt: Timestamp(millisecondsSinceEpoch: ms), userId: id)
        }

        var text: String { "\(createdAt.millisecondsSinceEpoch):\(userId)" }
    }

    struct BatchResult: Sendable, Equatable {
        var scanned: Int
        var applied: [String]
        var alreadyMembers: Int
        /// nil when the cohort is exhausted.
        var nextCursor: Cursor?
    }

    // MARK: Campaign rows

    static func loadCampaign(_ name: String, forUpdate: Bool = false, on db: DatabaseConnection) throws(DatabaseError) -> Campaign? {
        guard
            let row = try db.queryOne(
                """
                SELECT name, tier, expires_at, reason, created_by, created_at, revoked_at, revoked_by FROM billing_campaigns
                WHERE name = \(name) \(unsafeRaw: forUpdate ? "FOR UPDATE" : "")
                """)
        else { return nil }
        return Campaign(
            name: try row.string("name"), tier: Tier(rawValue: try row.string("tier")) ?? .plus,
            expiresAt: try row.optionalTimestamp("expires_at"), reason: try row.string("reason"),
            createdBy: try row.string("created_by"), createdAt: try row.timestamp("created_at"),
            revokedAt: try row.optionalTimestamp("revoked_at"), revokedBy: try row.optionalString("revoked_by"))
    }

    /// Creates the campaign on first use and locks its row (runs of one campaign serialize).
    /// A campaign keeps its tier and expiry: a run asking for others is a conflict, as is a
    /// run of an ended campaign.
    static func ensureCampaign(
        _ definition: Definition, actor: String, now: Timestamp,
        on db: DatabaseConnection
    ) throws -> Campaign {
        try db.execute(
            """
            INSERT IGNORE INTO billing_campaigns (name, tier, expires_at, reason, created_by, created_at)
            VALUES (\(definition.campaign), \(definition.tier.rawValue), \(definition.expiresAt), \(definition.reason), \(actor), \(now))
            """)
        guard let campaign = try loadCampaign(definition.campaign, forUpdate: true, on: db) else {
            throw DatabaseError.misuse("campaign vanished after insert")
        }
        if campaign.revokedAt != nil {
            throw BillingError(
                .conflict, "campaign \(campaign.name) was revoked",
                data: [
                    "campaign": .string(campaign.name),
                    "revokedAt": JSON(campaign.revokedAt?.iso8601),
                ])
        }
        if campaign.tier != definition.tier || campaign.expiresAt != definition.expiresAt {
            throw BillingError(
                .conflict, "campaign \(campaign.name) exists with another tier or expiry",
                data: [
                    "campaign": .string(campaign.name), "tier": .string(campaign.tier.rawValue),
                    "expiresAt": JSON(campaign.expiresAt?.iso8601),
                ])
        }
        return campaign
    }

    // MARK: Cohorts

    private static func cohortPredicate(_ cohort: Cohort, after cursor: Cursor?) -> SQLQuery {
        var query: SQLQuery = "u.deleted_at IS NULL AND u.created_at < \(cohort.createdBefore)"
        if let from = cohort.createdFrom { query.append(" AND u.created_at >= \(from)") }
        if let cursor {
            query.append(" AND (u.created_at > \(cursor.createdAt) OR (u.created_at = \(cursor.createdAt) AND u.id > \(cursor.userId)))")
        }
        return query
    }

    /// Dry run: how many users the cohort holds, how many are members already, and a sample.
    static func preview(
        _ cohort: Cohort, campaign: String, sampleSize: Int = 10,
        on db: DatabaseConnection
    ) throws(DatabaseError) -> (count: Int, alreadyMembers: Int, sample: [String]) {
        let predicate = cohortPredicate(cohort, after: nil)
        let counts = try db.queryOne(
            """
            SELECT COUNT(*) AS total, COUNT(m.user_id) AS members FROM billing_users u
            LEFT JOIN billing_campaign_members m ON m.campaign = \(campaign) AND m.user_id = u.id
            WHERE \(predicate)
            """)
        let sample = try db.query("SELECT u.id FROM billing_users u WHERE \(predicate) ORDER BY u.created_at, u.id LIMIT \(sampleSize)")
            .map { (row) throws(DatabaseError) -> String in try row.string("id") }
        return (try counts?.int("total") ?? 0, try counts?.int("members") ?? 0, sample)
    }

    /// Applies one bounded batch of the cohort after `cursor`, in one transaction.
    static func applyCohortBatch(
        _ definition: Definition, cohort: Cohort, cursor: Cursor?, batchSize: Int,
        actor: String, now: Timestamp, on db: DatabaseConnection
    ) throws -> BatchResult {
        try db.transaction(retries: 3, isolation: .readCommitted) { db -> BatchResult in
            _ = try ensureCampaign(definition, actor: actor, now: now, on: db)
            let rows = try db.query(
                """
                SELECT u.id, u.created_at FROM billing_users u WHERE \(cohortPredicate(cohort, after: cursor))
                ORDER BY u.created_at, u.id LIMIT \(batchSize)
                """)
            var ids: [String] = []
            var last: Cursor?
            for row in rows {
                let id = try row.string("id")
                ids.append(id)
                last = Cursor(createdAt: try row.timestamp("created_at"), userId: id)
            }
            let applied = try addMembers(ids, via: "cohort", definition: definition, actor: actor, now: now, on: db)
            return BatchResult(
                scanned: ids.count, applied: applied, alreadyMembers: ids.count - applied.count,
                nextCursor: rows.count < batchSize ? nil : last)
        }
    }

    /// Hand-picked users, all or nothing: an unknown id fails the call with nothing written.
    static func applyUsers(
        _ definition: Definition, userIds: [String], actor: String, now: Timestamp,
        on db: DatabaseConnection
    ) throws -> (applied: [String], alreadyMembers: Int) {
        try db.transaction(retries: 3, isolation: .readCommitted) { db -> (applied: [String], alreadyMembers: Int) in
            let known = try UserDirectory.knownUsers(userIds, on: db)
            let unknown = userIds.filter { !known.contains($0) }
            if !unknown.isEmpty {
                throw BillingError.notFound("user", ["userIds": .array(unknown.prefix(100).map(JSON.string)), "count": .int(Int64(unknown.count))])
            }
            _ = try ensureCampaign(definition, actor: actor, now: now, on: db)
            let unique = Array(Set(userIds)).sorted()
            let applied = try addMembers(unique, via: "users", definition: definition, actor: actor, now: now, on: db)
            return (applied, unique.count - applied.count)
        }
    }

    /// Inserts the memberships missing among `ids` (the campaign row is locked by the
    /// caller), one audit row per new member, and moves their access revision.
    private static func addMembers(
        _ ids: [String], via: String, definition: Definition, actor: String, now: Timestamp,
        on db: DatabaseConnection
    ) throws(DatabaseError) -> [String] {
        guard !ids.isEmpty else { return [] }
        let list = ids.map(SQLValue.string)
        var existing = Set<String>()
        for row in try db.query(
            """
            SELECT user_id FROM billing_campaign_members WHERE campaign = \(definition.campaign) AND user_id IN (\(list: list))
            """)
        { existing.insert(try row.string("user_id")) }
        let fresh = ids.filter { !existing.contains($0) }
        guard !fresh.isEmpty else { return [] }
        let freshList = fresh.map(SQLValue.string)
        try db.execute(
            """
            INSERT INTO billing_campaign_members (campaign, user_id, via, applied_by, applied_at)
            SELECT \(definition.campaign), u.id, \(via), \(actor), \(now) FROM billing_users u WHERE u.id IN (\(list: freshList))
            """)
        let detail: JSON = [
            "tier": .string(definition.tier.rawValue), "expiresAt": JSON(definition.expiresAt?.iso8601),
            "via": .string(via), "reason": .string(definition.reason),
        ]
        try db.execute(
            """
            INSERT INTO audit_log (actor, action, target_user_id, campaign, detail, created_at)
            SELECT \(actor), 'grandfather.apply', m.user_id, m.campaign, \(detail), \(now) FROM billing_campaign_members m
            WHERE m.campaign = \(definition.campaign) AND m.user_id IN (\(list: freshList))
            """)
        try db.execute("UPDATE billing_access SET revision = revision + 1, updated_at = \(now) WHERE user_id IN (\(list: freshList))")
        for userId in fresh { try AccessOutbox.accessChanged(userId, now: now, on: db) }
        return fresh
    }

    // MARK: Revoke and audit

    /// Ends the campaign: its memberships stay (the audit trail) but give nothing from now on.
    static func revoke(
        campaign name: String, actor: String, reason: String?, now: Timestamp,
        on db: DatabaseConnection
    ) throws -> (campaign: Campaign, members: Int, changed: Bool) {
        try db.transaction(retries: 3, isolation: .readCommitted) { db -> (campaign: Campaign, members: Int, changed: Bool) in
            guard let campaign = try loadCampaign(name, forUpdate: true, on: db) else {
                throw BillingError.notFound("campaign", ["campaign": .string(name)])
            }
            let members = try db.queryOne("SELECT COUNT(*) AS n FROM billing_campaign_members WHERE campaign = \(name)")?.int("n") ?? 0
            if campaign.revokedAt != nil { return (campaign, members, false) }
            try db.execute("UPDATE billing_campaigns SET revoked_at = \(now), revoked_by = \(actor) WHERE name = \(name)")
            try db.execute(
                """
                UPDATE billing_access a JOIN billing_campaign_members m ON m.user_id = a.user_id AND m.campaign = \(name)
                SET a.revision = a.revision + 1, a.updated_at = \(now)
                """)
            for row in try db.query("SELECT user_id FROM billing_campaign_members WHERE campaign = \(name) ORDER BY user_id") {
                try AccessOutbox.accessChanged(try row.string("user_id"), now: now, on: db)
            }
            try AuditLog.write(
                actor: actor, action: "grandfather.revoke", campaign: name,
                detail: ["members": .int(Int64(members)), "reason": JSON(reason)], now: now, on: db)
            return (try loadCampaign(name, on: db) ?? campaign, members, true)
        }
    }

    /// The campaign's active sources for a user at `now` (for the snapshot).
    static func sources(userId: String, now: Timestamp, on db: DatabaseConnection) throws(DatabaseError) -> [AccessSnapshot.AccessSource] {
        try db.query(
            """
            SELECT c.name, c.tier, c.expires_at FROM billing_campaign_members m JOIN billing_campaigns c ON c.name = m.campaign
            WHERE m.user_id = \(userId) AND c.revoked_at IS NULL AND (c.expires_at IS NULL OR c.expires_at > \(now))
            ORDER BY c.name
            """
        ).map { (row) throws(DatabaseError) -> AccessSnapshot.AccessSource in
            AccessSnapshot.AccessSource(
                tier: Tier(rawValue: try row.string("tier")) ?? .plus, kind: "campaign",
                expiresAt: try row.optionalTimestamp("expires_at"), campaign: try row.string("name"))
        }
    }

    /// Every campaign the user belongs to, with its state (for `access.get`).
    static func memberships(userId: String, now: Timestamp, on db: DatabaseConnection) throws(DatabaseError) -> [JSON] {
        try db.query(
            """
            SELECT m.campaign, m.via, m.applied_by, m.applied_at FROM billing_campaign_members m
            WHERE m.user_id = \(userId) ORDER BY m.applied_at, m.campaign
            """
        ).map { (row) throws(DatabaseError) -> JSON in
            let name = try row.string("campaign")
            var object = (try loadCampaign(name, on: db)?.json(at: now).objectValue) ?? ["campaign": .string(name)]
            object["via"] = .string(try row.string("via"))
            object["appliedBy"] = .string(try row.string("applied_by"))
            object["appliedAt"] = .string(try row.timestamp("applied_at").iso8601)
            return .object(object)
        }
    }
}
