/// App Store notifications whose signature verified but that failed a setting (bundle id,
/// app id, environment: `AppleVerificationError.isSettingMismatch`), kept in the quarantine
/// (`Quarantine`) so an operator who fixes the setting can re-run them (SPEC §5, §13). Only
/// the `signedPayload` is stored, one row per verified `notificationUUID` whatever the
/// spelling of its JWS (an equivalent signature, SPEC §19).
enum AppleQuarantine {
    /// Returns the row id, or nil when the quarantine is full.
    @discardableResult
    static func record(
        provider: EventProvider, signedPayload: String, error: AppleVerificationError,
        now: Timestamp, on db: DatabaseConnection
    ) throws -> UInt64? {
        try Quarantine.record(
            provider: provider, deliveryId: error.notificationUUID, reason: error.reason.rawValue, detail: error.detail,
            body: Array(signedPayload.utf8), now: now, on: db)
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
        let existing = try Quarantine.existingEvent(
            provider: delivery.event.provider, providerEventId: delivery.event.providerEventId, on: db)
        return QuarantineReplay(.duplicate(eventId: existing))
    }
}
