/// What the database holds for one user's access, read in one statement: his access row,
/// store subscriptions and the operator overlays (grants, campaign memberships) that have
/// not ended. It does not depend on the clock beyond the load instant; `AccessSnapshot`
/// judges it at an instant. Workers cache it under `version` (`SnapshotCache`).
struct AccessRecord: Sendable, Equatable {
    var userId: String
    var revision: UInt64
    /// `billing_access.snapshot_version`: changed by triggers (migration 009) in the same
    /// transaction as anything this record holds.
    var version: UInt64
    /// The access row exists but was never folded (see `AccessSnapshot.unclaimed`).
    var unclaimed: Bool
    /// Sign-up: quota windows are anchored there.
    var userCreatedAt: Timestamp
    var subscriptions: [SubscriptionState]
    /// Grants and campaign memberships neither revoked nor expired when loaded; a grant may
    /// start later (`startsAt`).
    var overlays: [Overlay]
    /// The instant the record was read at. Overlays that had expired by then were left out,
    /// so the record describes no instant before it.
    var loadedAt: Timestamp

    struct Overlay: Sendable, Equatable {
        var source: AccessSnapshot.AccessSource
        var startsAt: Timestamp?

        func isActive(at now: Timestamp) -> Bool {
            (startsAt.map { $0 <= now } ?? true) && (source.expiresAt.map { $0 > now } ?? true)
        }
    }

    /// The overlays in force at `now`.
    func overlaySources(at now: Timestamp) -> [AccessSnapshot.AccessSource] {
        overlays.filter { $0.isActive(at: now) }.map(\.source)
    }

    /// NULLs standing for the subscription columns in the overlay parts of the UNION.
    private static let subscriptionPlaceholders = Array(
        repeating: "NULL",
        count: SubscriptionState.columns.split(separator: ",").count
    ).joined(separator: ", ")

    /// Reads the record in one statement (consistent by itself, and inside the caller's
    /// transaction when there is one); nil when the user has no access row (not known).
    static func load(userId: String, now: Timestamp, on db: DatabaseConnection) throws(DatabaseError) -> AccessRecord? {
        let rows = try db.query(
            """
            SELECT 'store' AS part, a.revision, a.snapshot_version, a.folded_at IS NULL AS unclaimed, u.created_at AS user_created_at,
              \(unsafeRaw: SubscriptionState.columns), NULL AS overlay_tier, NULL AS overlay_starts_at, NULL AS overlay_expires_at,
              NULL AS overlay_campaign
            FROM billing_access a JOIN billing_users u ON u.id = a.user_id
            LEFT JOIN billing_subscriptions s ON s.user_id = a.user_id
            WHERE a.user_id = \(userId)
            UNION ALL
            SELECT 'grant', CAST(NULL AS UNSIGNED), CAST(NULL AS UNSIGNED), CAST(NULL AS SIGNED), CAST(NULL AS DATETIME(3)),
              \(unsafeRaw: subscriptionPlaceholders), g.tier, g.starts_at, g.expires_at, g.campaign
            FROM billing_grants g
            WHERE g.user_id = \(userId) AND g.revoked_at IS NULL AND (g.expires_at IS NULL OR g.expires_at > \(now))
            UNION ALL
            SELECT 'campaign', CAST(NULL AS UNSIGNED), CAST(NULL AS UNSIGNED), CAST(NULL AS SIGNED), CAST(NULL AS DATETIME(3)),
              \(unsafeRaw: subscriptionPlaceholders), c.tier, NULL, c.expires_at, c.name
            FROM billing_campaign_members m JOIN billing_campaigns c ON c.name = m.campaign
            WHERE m.user_id = \(userId) AND c.revoked_at IS NULL AND (c.expires_at IS NULL OR c.expires_at > \(now))
            """)
        guard let first = rows.first(where: { $0["part"] == .string("store") }) else { return nil }
        var record = AccessRecord(
            userId: userId, revision: try first.uint64("revision"), version: try first.uint64("snapshot_version"),
            unclaimed: try first.bool("unclaimed"), userCreatedAt: try first.timestamp("user_created_at"),
            subscriptions: [], overlays: [], loadedAt: now)
        for row in rows {
            switch try row.string("part") {
            case "store" where !row["subscription_id"].isNull:
                record.subscriptions.append(try SubscriptionState(row: row))
            case "grant", "campaign":
                let source = AccessSnapshot.AccessSource(
                    tier: Tier(rawValue: try row.string("overlay_tier")) ?? .plus,
                    kind: try row.string("part"),
                    expiresAt: try row.optionalTimestamp("overlay_expires_at"),
                    campaign: try row.optionalString("overlay_campaign"))
                record.overlays.append(Overlay(source: source, startsAt: try row.optionalTimestamp("overlay_starts_at")))
            default:
                break
            }
        }
        return record
    }
}

extension AccessSnapshot {
    /// `record` judged at `now` (not before `record.loadedAt`).
    init(record: AccessRecord, now: Timestamp, cadence: (String) -> Cadence?) {
        self.init(
            userId: record.userId, revision: record.revision, projection: StoreProjection(subscriptions: record.subscriptions),
            now: now, overlays: record.overlaySources(at: now), cadence: cadence)
        userCreatedAt = record.userCreatedAt
        unclaimed = record.unclaimed
    }

    /// Reads the user's projection, active grants and campaign memberships in one statement,
    /// so the three never straddle a commit; nil when the user has no access row (not known).
    static func load(
        userId: String, now: Timestamp, cadence: (String) -> Cadence?,
        on db: DatabaseConnection
    ) throws(DatabaseError) -> AccessSnapshot? {
        try AccessRecord.load(userId: userId, now: now, on: db).map { AccessSnapshot(record: $0, now: now, cadence: cadence) }
    }
}
