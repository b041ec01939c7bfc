/// `billing_quarantine`: deliveries whose authenticity was verified but that failed one of
/// this server's settings (an App Store bundle id, a Play package name), kept so that an
/// operator who fixes the setting can re-run them (`events.retryQuarantined`, SPEC §5, §13).
/// A row is one delivery: deduplicated by the provider's own id of it (`provider_event_id`,
/// a unique key: an App Store `notificationUUID`, a Pub/Sub `messageId`) and by the body's
/// SHA-256; a re-delivery counts (`deliveries`), it adds no row. Unresolved rows are bounded
/// in rows (`maxOpenRows`) and bytes (`maxOpenBytes`): beyond either, a new delivery is
/// refused and logged, and its provider keeps redelivering it.
enum Quarantine {
    static let maxOpenRows = 10_000
    static let maxOpenBytes: Int64 = 64 << 20

    /// Keeps `body` (what the provider's replayer reads again), in its own transaction.
    /// Returns the row id, or nil when the quarantine is full.
    @discardableResult
    static func record(
        provider: EventProvider, deliveryId: String?, reason: String, detail: String?, body: [UInt8],
        now: Timestamp, on db: DatabaseConnection
    ) throws -> UInt64? {
        let hash = SHA256.hexHash(body)
        let detail = detail.map { String($0.prefix(255)) }
        let deliveryId = deliveryId.map { $0.utf8Prefix(191) }
        let reason = String(reason.prefix(64))
        return try db.transaction(retries: 3) { db -> UInt64? in
            if let row = try db.queryOne(
                """
                SELECT id FROM billing_quarantine WHERE provider = \(provider.rawValue)
                  AND (payload_sha256 = \(hash) OR provider_event_id = \(deliveryId)) ORDER BY id LIMIT 1 FOR UPDATE
                """)
            {
                let id = try row.uint64("id")
                try db.execute(
                    """
                    UPDATE billing_quarantine SET deliveries = deliveries + 1, last_received_at = \(now),
                      reason = \(reason), reason_detail = \(detail) WHERE id = \(id)
                    """)
                return id
            }
            guard
                let open = try db.queryOne(
                    """
                    SELECT COUNT(*) AS n, CAST(COALESCE(SUM(LENGTH(payload)), 0) AS SIGNED) AS bytes
                    FROM billing_quarantine WHERE resolved_at IS NULL
                    """)
            else { return nil }
            guard try open.int64("n") < Int64(maxOpenRows), try open.int64("bytes") + Int64(body.count) <= maxOpenBytes else {
                return nil
            }
            let inserted = try db.execute(
                """
                INSERT INTO billing_quarantine (provider, provider_event_id, reason, reason_detail, payload_sha256, payload,
                  received_at, last_received_at)
                VALUES (\(provider.rawValue), \(deliveryId), \(reason), \(detail), \(hash), \(body), \(now), \(now))
                ON DUPLICATE KEY UPDATE deliveries = deliveries + 1, last_received_at = VALUES(last_received_at)
                """)
            return inserted.lastInsertID
        }
    }

    /// The inbox's id of the event `providerEventId` of `provider`, in the caller's
    /// transaction: what a replay that found its delivery already ingested reports.
    static func existingEvent(provider: EventProvider, providerEventId: String, on db: DatabaseConnection) throws(DatabaseError) -> UInt64? {
        try db.queryOne(
            """
            SELECT id FROM billing_events WHERE provider = \(provider.rawValue) AND provider_event_id = \(providerEventId)
            """)?.uint64("id")
    }
}
