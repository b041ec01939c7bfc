/// `events.retryQuarantined`: re-runs deliveries kept in `billing_quarantine` after an
/// operator fixed a trust root or secret. Generic over providers: each provider feature
/// registers how to replay its own deliveries (the App Store one verifies the JWS again);
/// a provider without a replayer is reported, never guessed at.
public struct QuarantinedDelivery: Sendable {
    public var id: UInt64
    public var provider: String
    public var reason: String
    public var payload: [UInt8]
    public var receivedAt: Timestamp
}

/// What a replay achieved. `stillFailing` leaves the row quarantined (with its new reason).
public enum ReplayOutcome: Sendable, Equatable {
    case applied(eventId: UInt64)
    case duplicate(eventId: UInt64?)
    case stillFailing(reason: String)
}

/// Verifies and ingests one quarantined body exactly as the provider's route would.
public typealias QuarantineReplayer = @Sendable (_ delivery: QuarantinedDelivery, _ services: BillingServices,
                                                 _ now: Timestamp, _ db: DatabaseConnection) throws -> ReplayOutcome

/// Provider name (`billing_quarantine.provider`) → replayer.
public struct QuarantineReplayers: Sendable {
    private var byProvider: [String: QuarantineReplayer] = [:]

    public init() {}

    public mutating func register(provider: String, _ replayer: @escaping QuarantineReplayer) {
        precondition(byProvider[provider] == nil, "quarantine replayer for \(provider) registered twice")
        byProvider[provider] = replayer
    }

    public func replayer(for provider: String) -> QuarantineReplayer? { byProvider[provider] }

    public var providers: [String] { byProvider.keys.sorted() }

    /// Re-runs the open quarantine rows `ids` (nil: all open rows, oldest first, at most
    /// `limit`). Each row is its own unit: one failing replay does not stop the others.
    public func retry(ids: [UInt64]?, limit: Int, actor: String, services: BillingServices, now: Timestamp,
                      on db: DatabaseConnection) throws -> [JSON] {
        var query: SQLQuery = "SELECT id, provider, reason, payload, received_at, resolved_at FROM billing_quarantine WHERE "
        if let ids {
            query.append("id IN (\(list: ids.map { SQLValue.uint($0) })) ORDER BY id")
        } else {
            query.append("resolved_at IS NULL ORDER BY id LIMIT \(limit)")
        }
        let rows = try db.query(query)
        var found = Set<UInt64>()
        var results: [JSON] = []
        for row in rows {
            let delivery = QuarantinedDelivery(id: try row.uint64("id"), provider: try row.string("provider"),
                                               reason: try row.string("reason"), payload: try row.bytes("payload"),
                                               receivedAt: try row.timestamp("received_at"))
            found.insert(delivery.id)
            if try row.optionalTimestamp("resolved_at") != nil {
                results.append(["id": .int(Int64(delivery.id)), "provider": .string(delivery.provider), "outcome": "already_resolved"])
                continue
            }
            guard let replayer = replayer(for: delivery.provider) else {
                results.append(["id": .int(Int64(delivery.id)), "provider": .string(delivery.provider), "outcome": "no_replayer"])
                continue
            }
            let outcome: ReplayOutcome
            do {
                outcome = try replayer(delivery, services, now, db)
            } catch let error as DatabaseError where error.isUnavailable || error.isDeadlockOrLockWait {
                throw error
            } catch {
                outcome = .stillFailing(reason: "replay_error")
            }
            results.append(try record(delivery, outcome, actor: actor, now: now, on: db))
        }
        for id in ids ?? [] where !found.contains(id) {
            results.append(["id": .int(Int64(id)), "outcome": "not_found"])
        }
        return results
    }

    private func record(_ delivery: QuarantinedDelivery, _ outcome: ReplayOutcome, actor: String, now: Timestamp,
                        on db: DatabaseConnection) throws -> JSON {
        try db.transaction(retries: 3, isolation: .readCommitted) { db -> JSON in
            var entry: JSONObject = ["id": .int(Int64(delivery.id)), "provider": .string(delivery.provider)]
            switch outcome {
            case .applied(let eventId), .duplicate(let eventId?):
                let resolution = outcome == .applied(eventId: eventId) ? "applied" : "duplicate"
                try db.execute("""
                    UPDATE billing_quarantine SET retried_at = \(now), retry_count = retry_count + 1, resolved_at = \(now),
                      resolution = \(resolution), event_id = \(eventId) WHERE id = \(delivery.id)
                    """)
                entry["outcome"] = .string(resolution)
                entry["eventId"] = .int(Int64(eventId))
            case .duplicate(nil):
                try db.execute("""
                    UPDATE billing_quarantine SET retried_at = \(now), retry_count = retry_count + 1, resolved_at = \(now),
                      resolution = 'duplicate' WHERE id = \(delivery.id)
                    """)
                entry["outcome"] = "duplicate"
            case .stillFailing(let reason):
                try db.execute("""
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
}
