/// Every provider's delivery goes through here: recorded once in the inbox, attached to
/// the known users it concerns, and folded into their access — all in one transaction, so
/// an acknowledged delivery is a committed one.
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
    /// deadlock), then runs its after-commit steps.
    ///
    /// - Parameter subjectCandidates: ids that may name the buyer, in preference order,
    ///   already filtered by `users.idPattern`.
    ///   - resolveSubject: when given, decides the subject candidates inside the ingestion
    ///     transaction instead of `subjectCandidates` (the App Store binding: the owner of
    ///     the subscription, read under a lock so a concurrent move cannot slip between).
    static func ingest(
        _ event: StoreEvent, payload: StoredPayload, subjectCandidates: [String], now: Timestamp,
        on db: DatabaseConnection,
        resolveSubject: ((DatabaseConnection) throws(DatabaseError) -> [String])? = nil
    ) throws -> Outcome {
        try commit(on: db) { db in
            try record(event, payload: payload, subjectCandidates: subjectCandidates, now: now, on: db, resolveSubject: resolveSubject)
        }
    }

    /// Runs `record` (or a provider's wrapper of it) as `ingest` does: in its own transaction
    /// (read committed, retried on deadlock), then the after-commit steps.
    static func commit(on db: DatabaseConnection, _ body: (DatabaseConnection) throws -> PendingIngestion) throws -> Outcome {
        let pending = try db.transaction(retries: 3, isolation: .readCommitted) { db -> PendingIngestion in try body(db) }
        try pending.finish(on: db)
        return pending.outcome
    }

    /// The body of `ingest`, inside the caller's open transaction (which should be read
    /// committed, as `ingest`'s is), so that the ingestion commits together with the caller's
    /// own writes (`events.retryQuarantined`: the quarantine row's resolution and its audit
    /// row) or not at all. The caller runs `finish` on the result once it has committed.
    static func record(
        _ event: StoreEvent, payload: StoredPayload, subjectCandidates: [String], now: Timestamp,
        on db: DatabaseConnection,
        resolveSubject: ((DatabaseConnection) throws(DatabaseError) -> [String])? = nil
    )
        throws(DatabaseError) -> PendingIngestion
    {
        guard db.isInTransaction else { throw .misuse("EventIngestion.record outside a transaction") }
        let candidates = try resolveSubject?(db) ?? subjectCandidates
        let outcome = try record(event, payload: payload, subjectCandidates: candidates, now: now, on: db)
        return PendingIngestion(outcome: outcome) { db in
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
                let candidates = subjectCandidates + event.transferredFrom + event.transferredTo
                let known = try db.transaction { db in try UserDirectory.knownUsers(candidates, on: db) }
                for userId in known.sorted() { try UserDirectory.claimUnmatched(userId, now: now, on: db) }
            }
        }
    }

    private static func record(
        _ event: StoreEvent, payload: StoredPayload, subjectCandidates: [String], now: Timestamp,
        on db: DatabaseConnection
    ) throws(DatabaseError) -> Outcome {
        // The subject is the first known candidate. For an event that will be folded, ask
        // about the first candidate with the fold's own locking read: when he is known (the
        // usual case) that one statement both decides the subject and locks and reads his
        // access, taken before the inbox row is written (as the claim and the user deletion
        // also lock the user before his events).
        var prelocked: AccessProjector.LockedAccess?
        let known: Set<String>
        if event.isApplicable, event.kind != .transfer, let preferred = subjectCandidates.first,
            let locked = try AccessProjector.lockKnownUser(preferred, on: db)
        {
            prelocked = locked
            known = [preferred]
        } else {
            known = try UserDirectory.knownUsers(subjectCandidates + event.transferredFrom + event.transferredTo, on: db)
        }
        let subject = subjectCandidates.first(where: known.contains)
        let senders = event.transferredFrom.filter(known.contains)
        let receivers = event.transferredTo.filter(known.contains)

        let status: EventInbox.Status
        var reason: String?
        var owner: String?
        if !event.isApplicable {
            status = .ignored
            reason =
                event.kind == .test
                ? "test"
                : event.kind == .unknown
                    ? "unknown_type"
                    : event.kind.isInformational ? "informational" : "no_timestamp"
            owner = subject
        } else if event.kind == .transfer {
            owner = receivers.first ?? senders.first
            status = owner == nil ? .unmatched : .applied
        } else {
            owner = subject
            status = subject == nil ? .unmatched : .applied
        }

        // An erased id is never a candidate, and the payload does not keep it (SPEC §19): the
        // event waits for nobody of his.
        var payload = payload
        var erased: Set<String> = []
        if status == .unmatched || event.kind == .transfer {
            erased = try ErasedUsers.erased((subjectCandidates + event.transferredFrom + event.transferredTo).filter { !known.contains($0) }, on: db)
            if !erased.isEmpty { payload = payload.scrubbed(identities: erased) }
        }
        let waiting = { (ids: [String]) in ids.filter { !known.contains($0) && !erased.contains($0) } }

        guard
            let eventId = try EventInbox.insert(
                event, payload: payload, userId: status == .unmatched ? nil : owner,
                status: status, statusReason: reason, receivedAt: now, on: db)
        else {
            return Outcome(duplicate: true, status: nil, eventId: nil, users: [])
        }

        var folded: [String] = []
        switch status {
        case .applied where event.kind == .transfer:
            for user in senders { try EventInbox.addParty(eventId: eventId, userId: user, role: .transferFrom, on: db) }
            for user in receivers { try EventInbox.addParty(eventId: eventId, userId: user, role: .transferTo, on: db) }
            try EventInbox.addCandidates(eventId: eventId, ids: waiting(event.transferredFrom), role: .transferFrom, on: db)
            try EventInbox.addCandidates(eventId: eventId, ids: waiting(event.transferredTo), role: .transferTo, on: db)
            folded = Array(Set(senders + receivers)).sorted()  // one lock order for every caller
        case .applied:
            try EventInbox.addParty(eventId: eventId, userId: subject!, role: .subject, on: db)
            folded = [subject!]
            // A confirmed purchase resets the offer ladders (SPEC §14), by either provider.
            if event.kind == .purchase || event.kind == .nonRenewingPurchase, let at = event.purchasedAt ?? event.intrinsicAt {
                try OfferingLadder.resetAfterPurchase(userId: subject!, purchasedAt: at, on: db)
            }
        case .unmatched:
            if event.kind == .transfer {
                try EventInbox.addCandidates(eventId: eventId, ids: waiting(event.transferredFrom), role: .transferFrom, on: db)
                try EventInbox.addCandidates(eventId: eventId, ids: waiting(event.transferredTo), role: .transferTo, on: db)
            } else {
                try EventInbox.addCandidates(eventId: eventId, ids: waiting(subjectCandidates), role: .subject, on: db)
            }
        case .ignored, .failed:
            break
        }
        var results: [String: AccessProjector.Result] = [:]
        // Every party locked before any is folded, in one global order (SPEC §5).
        if folded.count > 1 { try AccessProjector.lockAccessRows(folded, now: now, on: db) }
        for user in folded {
            results[user] = try AccessProjector.refold(
                userId: user, now: now, newEvent: event.kind == .transfer ? nil : event,
                locked: user == subject ? prelocked : nil, on: db)
        }
        // A transfer moves what its sender had before it. When one of the sender's earlier
        // events arrives after the transfer, the receivers must fold again too, or arrival
        // order would decide what they get. The sender's fold tells whether he ever gave
        // anything away, so the common case costs no query. (Receivers are locked after the
        // sender here, outside the sorted order; a rare deadlock this makes is retried.)
        if event.kind != .transfer, event.isApplicable, let at = event.intrinsicAt {
            var senders: [String] = []
            if status == .applied, let subject, let last = results[subject]?.lastTransferOutAt, last > at { senders = [subject] }
            if status == .unmatched { senders = subjectCandidates }
            let receivers = try AccessProjector.transferReceivers(senders: senders, after: at, on: db)
            for user in Set(receivers).subtracting(folded).sorted() {
                _ = try AccessProjector.refold(userId: user, now: now, on: db)
                folded.append(user)
            }
        }
        return Outcome(duplicate: false, status: status, eventId: eventId, users: folded)
    }
}

/// An ingestion recorded inside a transaction that has not committed yet (`EventIngestion.record`),
/// and the steps left for after its commit: claims that a concurrent transaction could not
/// see before it (`finish`). Never run them inside the transaction: they open their own.
struct PendingIngestion {
    let outcome: EventIngestion.Outcome
    private var steps: [(DatabaseConnection) throws -> Void]

    init(outcome: EventIngestion.Outcome, _ step: @escaping (DatabaseConnection) throws -> Void) {
        self.outcome = outcome
        self.steps = [step]
    }

    /// Adds a step to run after commit, after the ones already there.
    mutating func afterCommit(_ step: @escaping (DatabaseConnection) throws -> Void) {
        steps.append(step)
    }

    /// Runs the after-commit steps, in order; only once the recording transaction committed.
    func finish(on db: DatabaseConnection) throws {
        guard !db.isInTransaction else { throw DatabaseError.misuse("PendingIngestion.finish inside a transaction") }
        for step in steps { try step(db) }
    }
}
