/// The Google Play replayer of `events.retryQuarantined` (`QuarantineReplayers`, registered
/// in `BillingRPCMethods.quarantineReplayers`). A row holds a push whose OIDC token verified
/// on arrival (the token itself is short-lived and not kept) but whose `packageName` was not
/// `google.packageName`. Re-run with the *current* settings, it is what the push would be now:
/// still another package (`package_mismatch`), or ingested exactly as `GooglePlayWebhook`
/// would — the token's state read from Play and recorded under the push's key, inside the
/// retry's transaction (`.applied`, or `.duplicate` when the inbox already had it) — and the
/// purchase acknowledged at Google after that transaction commits.
///
/// The read from Play is made while the retry holds the lock of that one quarantine row
/// (an operator's re-run, bounded by `google.client.timeoutSeconds`); while Play cannot be
/// read the row stays open (`provider_unavailable`) and can be retried again.
enum GooglePlayQuarantineReplay {
    static func replay(
        _ quarantined: QuarantinedDelivery, ingestion: GooglePlayIngestion?, logger: Logger, now: Timestamp,
        on db: DatabaseConnection
    ) throws(DatabaseError) -> QuarantineReplay {
        guard let ingestion else { return QuarantineReplay(.stillFailing(reason: "not_configured")) }
        let push: GooglePlayPush
        do {
            push = try GooglePlayPush.decode(try JSON.parse(quarantined.payload, limits: JSONLimits(maxBytes: 1 << 18, maxDepth: 8)))
        } catch {
            return QuarantineReplay(.stillFailing(reason: "malformed"))
        }
        guard push.packageName == ingestion.api.packageName else { return QuarantineReplay(.stillFailing(reason: "package_mismatch")) }
        if let existing = try Quarantine.existingEvent(provider: .googlePlay, providerEventId: push.key, on: db) {
            return QuarantineReplay(.duplicate(eventId: existing))
        }
        let outcome: EventIngestion.Outcome
        let key: String
        switch push.step(now: now) {
        case .notice(let event):
            outcome = try ingestion.recordNoticeInTransaction(event, payload: push.inboxPayload, now: now, on: db)
            key = event.providerEventId
        case .read(let token, let kind, let cause):
            let read: GooglePlayRead
            do {
                read = try ingestion.read(token: token, kind: kind)
            } catch  where error.isUnknownToken {
                let event = push.unknownToken(token, cause: cause, now: now)
                outcome = try ingestion.recordNoticeInTransaction(event, payload: push.inboxPayload, now: now, on: db)
                key = event.providerEventId
                break
            } catch {
                logger.warning("Play Developer API not readable; the quarantined push stays", ["google.error": .string(error.code)])
                return QuarantineReplay(.stillFailing(reason: "provider_unavailable"))
            }
            outcome = try ingestion.recordInTransaction(
                read, token: token, cause: cause, providerEventId: push.key, poster: nil, readAt: now, payload: push.inboxPayload,
                on: db
            ).ingestion
            key = push.key
            try db.afterCommit { db in ingestion.acknowledgeIfNeeded(read, token: token, now: now, logger: logger, on: db) }
        }
        if !outcome.duplicate, let eventId = outcome.eventId { return QuarantineReplay(.applied(eventId: eventId)) }
        return QuarantineReplay(.duplicate(eventId: try Quarantine.existingEvent(provider: .googlePlay, providerEventId: key, on: db)))
    }
}
