/// `events.retryQuarantined`: re-runs deliveries kept in `billing_quarantine` after an
/// operator fixed a trust root or secret. Generic over providers: each provider feature
/// registers how to replay its own deliveries (the App Store one verifies the JWS again);
/// a provider without a replayer is reported, never guessed at.
struct QuarantinedDelivery: Sendable {
    var id: UInt64
    var provider: String
    var reason: String
    var payload: [UInt8]
    var receivedAt: Timestamp
}

/// What a replay achieved. `stillFailing` leaves the row quarantined (with its new reason).
enum ReplayOutcome: Sendable, Equatable {
    case applied(eventId: UInt64)
    case duplicate(eventId: UInt64?)
    case stillFailing(reason: String)
}

/// A replay done inside the retry's transaction: its outcome (an ingestion's after-commit
/// steps are registered on that transaction).
struct QuarantineReplay {
    var outcome: ReplayOutcome

    init(_ outcome: ReplayOutcome) {
        self.outcome = outcome
    }
}

/// Verifies and ingests one quarantined body exactly as the provider's route would, inside
/// the open transaction of `db` (ingestion through `EventIngestion.record`, never its own
/// transaction), without touching the quarantine row.
typealias QuarantineReplayer =
    @Sendable (
        _ delivery: QuarantinedDelivery, _ now: Timestamp,
        _ db: DatabaseConnection
    ) throws -> QuarantineReplay

/// Provider name (`billing_quarantine.provider`) → replayer.
struct QuarantineReplayers: Sendable {
    private var byProvider: [String: QuarantineReplayer] = [:]

    init() {}

    mutating func register(provider: String, _ replayer: @escaping QuarantineReplayer) {
        precondition(byProvider[provider] == nil, "quarantine replayer for \(provider) registered twice")
        byProvider[provider] = replayer
    }

    func replayer(for provider: String) -> QuarantineReplayer? { byProvider[provider] }

    var providers: [String] { byProvider.keys.sorted() }

    /// Re-runs the quarantine rows `ids`, in the order given (nil: the open rows after
    /// `afterId`, oldest first, at most `limit`). Each row is its own unit: one failing replay does not stop
    /// the others, and a row's replay is one transaction (`retry(id:...)`).
    func retry(
        ids: [UInt64]?, afterId: UInt64 = 0, limit: Int, actor: String, now: Timestamp,
        on db: DatabaseConnection
    ) throws -> [JSON] {
        let targets =
            try ids
            ?? db.query(
                """
                SELECT id FROM billing_quarantine WHERE resolved_at IS NULL AND id > \(afterId) ORDER BY id LIMIT \(limit)
                """
            )
            .map { (row) throws(DatabaseError) -> UInt64 in try row.uint64("id") }
        return try targets.map { id in try retry(id: id, actor: actor, now: now, on: db) }
    }

    /// One row in one transaction: the row is locked, replayed, resolved (or given its new
    /// reason) and audited, and the replay's ingestion (inbox row, binding, fold) commits with
    /// them or not at all; the ingestion's after-commit claims run after. A replayer that
    /// throws takes its writes with it: the row then stays open, recorded as `replay_error`.
    private func retry(
        id: UInt64, actor: String, now: Timestamp,
        on db: DatabaseConnection
    ) throws -> JSON {
        do {
            return try db.transaction(retries: 3, isolation: .readCommitted) { db -> JSON in
                let delivery: QuarantinedDelivery
                switch try Self.lockOpenRow(id, on: db) {
                case .open(let row): delivery = row
                case .done(let entry): return entry
                }
                guard let replayer = replayer(for: delivery.provider) else {
                    return ["id": .int(Int64(id)), "provider": .string(delivery.provider), "outcome": "no_replayer"]
                }
                let replay: QuarantineReplay
                do {
                    replay = try replayer(delivery, now, db)
                } catch let error as DatabaseError where error.isUnavailable || error.isDeadlockOrLockWait {
                    throw error
                } catch {
                    throw ReplayFailed()
                }
                return try Self.record(delivery, replay.outcome, actor: actor, now: now, on: db)
            }
        } catch is ReplayFailed {
            return try db.transaction(retries: 3) { db -> JSON in
                switch try Self.lockOpenRow(id, on: db) {
                case .open(let delivery):
                    return try Self.record(delivery, .stillFailing(reason: "replay_error"), actor: actor, now: now, on: db)
                case .done(let entry):
                    return entry
                }
            }
        }
    }

    /// The replayer threw something other than an outage or a deadlock.
    private struct ReplayFailed: Error {}

    private enum LockedRow {
        case open(QuarantinedDelivery)
        /// Nothing to replay: the row's entry (not found, already resolved).
        case done(JSON)
    }

    /// The row `id`, locked for the rest of the transaction (a concurrent retry of the same
    /// row waits, then finds it resolved).
    private static func lockOpenRow(_ id: UInt64, on db: DatabaseConnection) throws(DatabaseError) -> LockedRow {
        guard
            let row = try db.queryOne(
                """
                SELECT id, provider, reason, payload, received_at, resolved_at FROM billing_quarantine WHERE id = \(id) FOR UPDATE
                """)
        else {
            return .done(["id": .int(Int64(id)), "outcome": "not_found"])
        }
        let delivery = QuarantinedDelivery(
            id: id, provider: try row.string("provider"), reason: try row.string("reason"),
            payload: try row.bytes("payload"), receivedAt: try row.timestamp("received_at"))
        if try row.optionalTimestamp("resolved_at") != nil {
            return .done(["id": .int(Int64(id)), "provider": .string(delivery.provider), "outcome": "already_resolved"])
        }
        return .open(delivery)
    }

    /// The row's new state and its audit row, in the caller's transaction.
    private static func record(
        _ delivery: QuarantinedDelivery, _ outcome: ReplayOutcome, actor: String, now: Timestamp,
        on db: DatabaseConnection
    ) throws(DatabaseError) -> JSON {
        var entry: JSONObject = ["id": .int(Int64(delivery.id)), "provider": .string(delivery.provider)]
        switch outcome {
        case .applied(let eventId), .duplicate(let eventId?):
            let resolution = outcome == .applied(eventId: eventId) ? "applied" : "duplicate"
            try db.execute(
                """
                UPDATE billing_quarantine SET retried_at = \(now), retry_count = retry_count + 1, resolved_at = \(now),
                  resolution = \(resolution), event_id = \(eventId) WHERE id = \(delivery.id)
                """)
            entry["outcome"] = .string(resolution)
            entry["eventId"] = .int(Int64(eventId))
        case .duplicate(nil):
            try db.execute(
                """
                UPDATE billing_quarantine SET retried_at = \(now), retry_count = retry_count + 1, resolved_at = \(now),
                  resolution = 'duplicate' WHERE id = \(delivery.id)
                """)
            entry["outcome"] = "duplicate"
        case .stillFailing(let reason):
            try db.execute(
                """
                UPDATE billing_quarantine SET retried_at = \(now), retry_count = retry_count + 1, reason = \(reason)
                WHERE id = \(delivery.id)
                """)
            entry["outcome"] = "still_failing"
            entry["reason"] = .string(reason)
        }
        try AuditLog.write(actor: actor, action: "events.retryQuarantined", detail: .object(entry), now: now, on: db)
        return .object(entry)
    }
}
