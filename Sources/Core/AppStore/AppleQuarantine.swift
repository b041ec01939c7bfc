/// Deliveries that failed App Store verification, kept in `billing_quarantine` (SPEC §5):
/// deduplicated by the SHA-256 of the body (a re-delivery counts, it adds no row) and
/// bounded (`maxOpenRows` unresolved rows; beyond that a new body is refused and logged,
/// and Apple keeps retrying it).
public enum AppleQuarantine {
    public static let maxOpenRows = 10_000

    /// Returns the row id, or nil when the quarantine is full.
    @discardableResult
    public static func record(provider: EventProvider, body: [UInt8], error: AppleVerificationError,
                              now: Timestamp, on db: DatabaseConnection) throws -> UInt64? {
        let hash = SHA256.hexHash(body)
        let detail = error.detail.map { String($0.prefix(255)) }
        return try db.transaction(retries: 3) { db -> UInt64? in
            if let row = try db.queryOne("""
                SELECT id FROM billing_quarantine WHERE provider = \(provider.rawValue) AND payload_sha256 = \(hash) FOR UPDATE
                """) {
                let id = try row.uint64("id")
                try db.execute("""
                    UPDATE billing_quarantine SET deliveries = deliveries + 1, last_received_at = \(now),
                      reason = \(error.reason.rawValue), reason_detail = \(detail) WHERE id = \(id)
                    """)
                return id
            }
            let open = try db.queryOne("SELECT COUNT(*) AS n FROM billing_quarantine WHERE resolved_at IS NULL")?.int64("n") ?? 0
            guard open < Int64(maxOpenRows) else { return nil }
            let inserted = try db.execute("""
                INSERT INTO billing_quarantine (provider, reason, reason_detail, payload_sha256, payload, received_at, last_received_at)
                VALUES (\(provider.rawValue), \(error.reason.rawValue), \(detail), \(hash), \(body), \(now), \(now))
                ON DUPLICATE KEY UPDATE deliveries = deliveries + 1, last_received_at = VALUES(last_received_at)
                """)
            return inserted.lastInsertID
        }
    }
}

/// Re-runs quarantined App Store notifications after a trust fix (`events.retryQuarantined`
/// calls it): each body is verified again with the *current* configuration; one that now
/// verifies is ingested like a fresh delivery and its row resolved (`applied`, or
/// `duplicate` when the inbox already had it); one that still fails stays, with its new
/// reason and `retry_count` + 1.
public enum AppleQuarantineReplay {
    public struct Outcome: Sendable, Equatable {
        public enum Result: String, Sendable { case applied, duplicate, stillFailing = "still_failing", notFound = "not_found", notApple = "not_apple", alreadyResolved = "already_resolved" }
        public var id: UInt64
        public var result: Result
        public var reason: String?
        public var eventId: UInt64?

        public var json: JSON {
            ["id": .int(Int64(id)), "result": .string(result.rawValue), "reason": JSON(reason),
             "eventId": eventId.map { .int(Int64($0)) } ?? .null]
        }
    }

    /// With the process's services (its verifier, catalog, id pattern and binding policy).
    public static func retry(ids: [UInt64], services: BillingServices, now: Timestamp, on db: DatabaseConnection) throws -> [Outcome] {
        guard let verifier = services.appleVerifier else { throw APIError.notConfigured("App Store is not configured (apple.*)") }
        return try retry(ids: ids, verifier: verifier, catalog: services.configuration.products, idPattern: services.idPattern,
                         policy: services.configuration.binding.policy, now: now, on: db)
    }

    public static func retry(ids: [UInt64], verifier: AppleSignedDataVerifier, catalog: AppleDelivery.Catalog,
                             idPattern: UserIdPattern, policy: BillingConfiguration.Binding.Policy, now: Timestamp,
                             on db: DatabaseConnection) throws -> [Outcome] {
        var outcomes: [Outcome] = []
        for id in ids {
            guard let row = try db.queryOne("SELECT provider, payload, resolved_at FROM billing_quarantine WHERE id = \(id)") else {
                outcomes.append(Outcome(id: id, result: .notFound)); continue
            }
            guard try row.string("provider") == EventProvider.appleNotification.rawValue else {
                outcomes.append(Outcome(id: id, result: .notApple)); continue
            }
            guard try row.optionalTimestamp("resolved_at") == nil else {
                outcomes.append(Outcome(id: id, result: .alreadyResolved)); continue
            }
            let replayed = try replay(body: try row.bytes("payload"), verifier: verifier, catalog: catalog, idPattern: idPattern,
                                      policy: policy, now: now, on: db)
            if replayed.result == .stillFailing {
                try db.execute("""
                    UPDATE billing_quarantine SET retried_at = \(now), retry_count = retry_count + 1, reason = \(replayed.reason) WHERE id = \(id)
                    """)
            } else {
                try db.execute("""
                    UPDATE billing_quarantine SET retried_at = \(now), retry_count = retry_count + 1, resolved_at = \(now),
                      resolution = \(replayed.result.rawValue), event_id = \(replayed.eventId) WHERE id = \(id) AND resolved_at IS NULL
                    """)
            }
            var outcome = replayed
            outcome.id = id
            outcomes.append(outcome)
        }
        return outcomes
    }

    /// One quarantined body, verified and ingested exactly as the webhook would, without
    /// touching its quarantine row (`id` is 0 in the result): the per-delivery step a
    /// generic `events.retryQuarantined` replayer calls. `.applied`, `.duplicate` (with the
    /// inbox row already holding it) or `.stillFailing` with the new reason.
    public static func replay(body: [UInt8], services: BillingServices, now: Timestamp, on db: DatabaseConnection) throws -> Outcome {
        guard let verifier = services.appleVerifier else { return Outcome(id: 0, result: .stillFailing, reason: "not_configured") }
        return try replay(body: body, verifier: verifier, catalog: services.configuration.products, idPattern: services.idPattern,
                          policy: services.configuration.binding.policy, now: now, on: db)
    }

    public static func replay(body: [UInt8], verifier: AppleSignedDataVerifier, catalog: AppleDelivery.Catalog,
                              idPattern: UserIdPattern, policy: BillingConfiguration.Binding.Policy, now: Timestamp,
                              on db: DatabaseConnection) throws -> Outcome {
        let delivery: AppleDelivery
        do {
            delivery = try AppleWebhook.decode(body: body, verifier: verifier, catalog: catalog, idPattern: idPattern, now: now)
        } catch {
            return Outcome(id: 0, result: .stillFailing, reason: (error as? AppleVerificationError)?.reason.rawValue ?? "malformed")
        }
        let ingested = try AppleIngestion.ingest(delivery, policy: policy, now: now, on: db)
        var eventId = ingested.eventId
        if ingested.duplicate {
            eventId = try db.queryOne("""
                SELECT id FROM billing_events WHERE provider = \(delivery.event.provider.rawValue)
                  AND provider_event_id = \(delivery.event.providerEventId)
                """)?.uint64("id")
        }
        return Outcome(id: 0, result: ingested.duplicate ? .duplicate : .applied, eventId: eventId)
    }
}
