/// Deliveries that failed App Store verification, kept in `billing_quarantine` (SPEC §5):
/// deduplicated by the SHA-256 of the body (a re-delivery counts, it adds no row) and
/// bounded (`maxOpenRows` unresolved rows; beyond that a new body is refused and logged,
/// and Apple keeps retrying it).
enum AppleQuarantine {
    static let maxOpenRows = 10_000

    /// Returns the row id, or nil when the quarantine is full.
    @discardableResult
    static func record(provider: EventProvider, body: [UInt8], error: AppleVerificationError,
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

/// The App Store replayer of `events.retryQuarantined` (`QuarantineReplayers`, registered
/// in `BillingRPCMethods.quarantineReplayers`): each body is verified again with the
/// *current* configuration; one that now verifies is ingested like a fresh delivery, inside
/// the retry's transaction (`.applied`, or `.duplicate` when the inbox already had it); one
/// that still fails gives its new reason.
enum AppleQuarantineReplay {
    /// One quarantined body, verified and ingested exactly as the webhook would with the
    /// process's settings (verifier — nil when not configured —, catalog, id pattern, binding
    /// policy), inside the caller's open transaction (`AppleIngestion.record`), without
    /// touching its quarantine row.
    static func replay(_ quarantined: QuarantinedDelivery, verifier: AppleSignedDataVerifier?, catalog: AppleDelivery.Catalog,
                       idPattern: UserIdPattern, policy: BillingConfiguration.Binding.Policy, now: Timestamp,
                       on db: DatabaseConnection) throws(DatabaseError) -> QuarantineReplay {
        guard let verifier else { return QuarantineReplay(.stillFailing(reason: "not_configured")) }
        let delivery: AppleDelivery
        do {
            delivery = try AppleWebhook.decode(body: quarantined.payload, verifier: verifier, catalog: catalog,
                                               idPattern: idPattern, now: now)
        } catch {
            return QuarantineReplay(.stillFailing(reason: (error as? AppleVerificationError)?.reason.rawValue ?? "malformed"))
        }
        let pending = try AppleIngestion.record(delivery, policy: policy, now: now, on: db)
        if !pending.outcome.duplicate, let eventId = pending.outcome.eventId {
            return QuarantineReplay(.applied(eventId: eventId), ingestion: pending)
        }
        let existing = try db.queryOne("""
            SELECT id FROM billing_events WHERE provider = \(delivery.event.provider.rawValue)
              AND provider_event_id = \(delivery.event.providerEventId)
            """)?.uint64("id")
        return QuarantineReplay(.duplicate(eventId: existing), ingestion: pending)
    }
}
