/// App Store notifications whose signature verified but that failed a setting (bundle id,
/// app id, environment: `AppleVerificationError.isSettingMismatch`), kept in
/// `billing_quarantine` so an operator who fixes the setting can re-run them (SPEC §5, §13).
/// Only the `signedPayload` is stored; rows are deduplicated by the notification's verified
/// `notificationUUID` (`provider_event_id`, a unique key: whatever the spelling of its JWS —
/// an equivalent signature —, one notification is one row, SPEC §19) and by the body's
/// SHA-256; a re-delivery counts, it adds no row. Unresolved rows are bounded in rows
/// (`maxOpenRows`) and bytes (`maxOpenBytes`): beyond either, a new delivery is refused and
/// logged, and Apple keeps retrying it.
enum AppleQuarantine {
    static let maxOpenRows = 10_000
    static let maxOpenBytes: Int64 = 64 << 20

    /// Returns the row id, or nil when the quarantine is full.
    @discardableResult
    static func record(
        provider: EventProvider, signedPayload: String, error: AppleVerificationError,
        now: Timestamp, on db: DatabaseConnection
    ) throws -> UInt64? {
        let body = Array(signedPayload.utf8)
        let hash = SHA256.hexHash(body)
        let detail = error.detail.map { String($0.prefix(255)) }
        let notification = error.notificationUUID.map { $0.utf8Prefix(191) }
        return try db.transaction(retries: 3) { db -> UInt64? in
            if let row = try db.queryOne(
                """
                SELECT id FROM billing_quarantine WHERE provider = \(provider.rawValue)
                  AND (payload_sha256 = \(hash) OR provider_event_id = \(notification)) ORDER BY id LIMIT 1 FOR UPDATE
                """)
            {
                let id = try row.uint64("id")
                try db.execute(
                    """
                    UPDATE billing_quarantine SET deliveries = deliveries + 1, last_received_at = \(now),
                      reason = \(error.reason.rawValue), reason_detail = \(detail) WHERE id = \(id)
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
                VALUES (\(provider.rawValue), \(notification), \(error.reason.rawValue), \(detail), \(hash), \(body), \(now), \(now))
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
    static func replay(
        _ quarantined: QuarantinedDelivery, verifier: AppleSignedDataVerifier?, catalog: AppleDelivery.Catalog,
        idPattern: UserIdPattern, policy: BillingConfiguration.Binding.Policy, now: Timestamp,
        on db: DatabaseConnection
    ) throws(DatabaseError) -> QuarantineReplay {
        guard let verifier else { return QuarantineReplay(.stillFailing(reason: "not_configured")) }
        let delivery: AppleDelivery
        do {
            // Rows hold the signedPayload (rows written before migration-time 011 hold the
            // whole request body, `{"signedPayload": ...}`).
            if quarantined.payload.first == UInt8(ascii: "{") {
                delivery = try AppleWebhook.decode(
                    body: quarantined.payload, verifier: verifier, catalog: catalog,
                    idPattern: idPattern, now: now)
            } else {
                delivery = try AppleDelivery.notification(
                    signedPayload: String(decoding: quarantined.payload, as: UTF8.self),
                    verifier: verifier, catalog: catalog, idPattern: idPattern, now: now)
            }
        } catch {
            return QuarantineReplay(.stillFailing(reason: (error as? AppleVerificationError)?.reason.rawValue ?? "malformed"))
        }
        let recorded = try AppleIngestion.record(delivery, policy: policy, now: now, on: db)
        if !recorded.duplicate, let eventId = recorded.eventId { return QuarantineReplay(.applied(eventId: eventId)) }
        let existing = try db.queryOne(
            """
            SELECT id FROM billing_events WHERE provider = \(delivery.event.provider.rawValue)
              AND provider_event_id = \(delivery.event.providerEventId)
            """)?.uint64("id")
        return QuarantineReplay(.duplicate(eventId: existing))
    }
}
