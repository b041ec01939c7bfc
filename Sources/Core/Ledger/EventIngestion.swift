/// Every provider's delivery goes through here: recorded once in the inbox, attached to
/// the known users it concerns, and folded into their access — all in one transaction, so
/// an acknowledged delivery is a committed one. Two entry points: `deliver` (its own
/// transaction) and `record` (the caller's: a pull, a replay); what to write is decided by
/// `IngestionDecision`, and run here.
enum EventIngestion {
    struct Outcome: Sendable, Equatable {
        var duplicate: Bool
        var status: EventInbox.Status?
        var eventId: UInt64?
        /// Users whose access was re-folded.
        var users: [String]

        var json: JSON {
            if duplicate { return ["duplicate": true] }
            return ["duplicate": false, "status": JSON(status?.rawValue), "eventId": eventId.map { .int(Int64($0)) } ?? .null]
        }
    }

    /// The metrics' name for what became of a delivery.
    static func metricsOutcome(_ outcome: Outcome) -> BillingMetrics.WebhookOutcome {
        if outcome.duplicate { return .duplicate }
        switch outcome.status {
        case .applied: return .applied
        case .unmatched: return .unmatched
        case .ignored: return .ignored
        case .failed, nil: return .quarantined
        }
    }

    /// Records and folds one delivery in its own transaction (read committed, retried on
    /// deadlock); its after-commit steps run once it committed. A provider's webhook, a
    /// posted transaction: the one entry point for what arrives on its own.
    static func deliver(_ delivery: Delivery, now: Timestamp, on db: DatabaseConnection) throws -> Outcome {
        try db.transaction(retries: 3, isolation: .readCommitted) { db in try record(delivery, now: now, on: db) }
    }

    /// Records and folds one delivery inside the caller's open transaction (which should be
    /// read committed, as `deliver`'s is), so that it commits together with the caller's own
    /// writes or not at all: a pull (`subscriptions.reconcile`, the reconcile sweeper) or a
    /// replay (`events.retryQuarantined`: the quarantine row's resolution and its audit row).
    /// Its after-commit steps are registered on that transaction (`afterCommit`).
    static func record(_ delivery: Delivery, now: Timestamp, on db: DatabaseConnection) throws(DatabaseError) -> Outcome {
        guard db.isInTransaction else { throw .misuse("EventIngestion.record outside a transaction") }
        let event = delivery.event
        let candidates = try delivery.resolveCandidates?(db) ?? delivery.candidates
        let outcome = try execute(event, payload: delivery.payload, candidates: candidates, now: now, on: db)
        guard outcome.duplicate || outcome.status == .unmatched else { return outcome }
        try db.afterCommit { db in
            // A user who became known between our lookup and our commit has already looked
            // for his unmatched events and not seen this one: claim it for him now
            // (idempotent). A duplicate of a still unmatched event does the same: the first
            // delivery may have committed and then died (kill -9, lost connection) before its
            // claim ran, and the provider's retry is the only caller left to finish it.
            var unmatched = outcome.status == .unmatched
            if outcome.duplicate {
                unmatched =
                    try db.queryOne(
                        """
                        SELECT 1 AS waiting FROM billing_events
                        WHERE provider = \(event.provider.rawValue) AND provider_event_id = \(event.providerEventId) AND status = 'unmatched'
                        """) != nil
            }
            if unmatched {
                let ids = IngestionDecision.claimIds(of: event, candidates: delivery.candidates)
                let known = try db.transaction { db in try UserDirectory.knownUsers(ids, on: db) }
                for userId in known.sorted() { try UserDirectory.claimUnmatched(userId, now: now, on: db) }
            }
        }
        if outcome.status == .unmatched, let step = delivery.afterCommitWhenUnmatched { try db.afterCommit(step) }
        return outcome
    }

    /// Runs the decision (`IngestionDecision`): the reads it asks for, under the user's
    /// lock, then its writes and folds.
    private static func execute(
        _ event: StoreEvent, payload: StoredPayload, candidates: [String], now: Timestamp,
        on db: DatabaseConnection
    ) throws(DatabaseError) -> Outcome {
        var prelocked: AccessProjector.LockedAccess?
        let known: Set<String>
        switch IngestionDecision.lookup(for: event, candidates: candidates) {
        case .lockPreferred(let preferred, let otherwise):
            if let locked = try AccessProjector.lockKnownUser(preferred, on: db) {
                prelocked = locked
                known = [preferred]
            } else {
                known = try UserDirectory.knownUsers(otherwise, on: db)
            }
        case .knownUsers(let ids):
            known = try UserDirectory.knownUsers(ids, on: db)
        }
        let decision = IngestionDecision(event: event, candidates: candidates, known: known)
        let erased = try decision.erasureCheck.map { (ids) throws(DatabaseError) in try ErasedUsers.erased(ids, on: db) } ?? []
        let writes = decision.writes(erased: erased)

        guard
            let eventId = try EventInbox.insert(
                event, payload: writes.scrub.isEmpty ? payload : payload.scrubbed(identities: writes.scrub), userId: writes.owner,
                status: decision.status, statusReason: decision.reason, receivedAt: now, on: db)
        else {
            return Outcome(duplicate: true, status: nil, eventId: nil, users: [])
        }
        if decision.status == .applied, let owner = writes.owner {
            try AccessOutbox.eventApplied(event, eventId: eventId, userId: owner, now: now, on: db)
        }
        for party in writes.parties { try EventInbox.addParty(eventId: eventId, userId: party.userId, role: party.role, on: db) }
        for waiting in writes.waiting { try EventInbox.addCandidates(eventId: eventId, ids: waiting.ids, role: waiting.role, on: db) }
        if let reset = writes.ladderReset { try OfferingLadder.resetAfterPurchase(userId: reset.userId, purchasedAt: reset.at, on: db) }

        // Every party locked before any is folded, in the global order (`UserLock`).
        if writes.fold.count > 1 { try UserLock.lockAll(writes.fold, now: now, on: db) }
        var folded = writes.fold
        var subjectFold: AccessProjector.Result?
        for user in writes.fold {
            let result = try AccessProjector.refold(
                userId: user, now: now, newEvent: decision.foldedEvent, locked: user == decision.subject ? prelocked : nil, on: db)
            if user == decision.subject { subjectFold = result }
        }
        if let (senders, after) = decision.inheritingSenders(subjectLastTransferOutAt: subjectFold?.lastTransferOutAt) {
            let receivers = try AccessProjector.transferReceivers(senders: senders, after: after, on: db)
            for user in IngestionDecision.lateReceivers(receivers, folded: folded) {
                _ = try AccessProjector.refold(userId: user, now: now, on: db)
                folded.append(user)
            }
        }
        return Outcome(duplicate: false, status: decision.status, eventId: eventId, users: folded)
    }
}

extension EventIngestion {
    /// One delivery as a provider hands it to the ledger: the normalized event, what the inbox
    /// keeps of it, and the ids that may name the buyer, in preference order (already filtered
    /// by `users.idPattern`).
    struct Delivery {
        var event: StoreEvent
        var payload: StoredPayload
        var candidates: [String]
        /// When set, decides the candidates inside the ingestion's transaction instead of
        /// `candidates` (the App Store binding: the subscription's owner, read under a lock so a
        /// concurrent move cannot slip between).
        var resolveCandidates: ((DatabaseConnection) throws(DatabaseError) -> [String])?
        /// A provider's own after-commit step for an event stored waiting (the App Store binding
        /// claims it by subscription: a binding created meanwhile could not see it).
        var afterCommitWhenUnmatched: ((DatabaseConnection) throws -> Void)?

        init(
            event: StoreEvent, payload: StoredPayload, candidates: [String],
            resolveCandidates: ((DatabaseConnection) throws(DatabaseError) -> [String])? = nil,
            afterCommitWhenUnmatched: ((DatabaseConnection) throws -> Void)? = nil
        ) {
            self.event = event
            self.payload = payload
            self.candidates = candidates
            self.resolveCandidates = resolveCandidates
            self.afterCommitWhenUnmatched = afterCommitWhenUnmatched
        }
    }
}
