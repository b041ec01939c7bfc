/// What becomes of one delivery, decided without I/O: from the event, its subject
/// candidates and what was read of them under the user's lock (who is known, who was
/// erased), which inbox row to write, whom to link it to, whom it waits for and whom to
/// fold. `EventIngestion` reads what the decision asks for and runs what it says, in one
/// transaction; everything here is a value, tested over every combination without a
/// database (`IngestionDecisionTests`).
struct IngestionDecision: Sendable, Equatable {
    /// The first read of an ingestion, under the lock.
    enum Lookup: Sendable, Equatable {
        /// Lock and read the preferred candidate's access with the fold's own locking read
        /// (`AccessProjector.lockKnownUser`): when he is known (the usual case) one statement
        /// decides the subject and locks him before the inbox row is written. When he is
        /// not, look up `otherwise`.
        case lockPreferred(String, otherwise: [String])
        /// Which of these ids name known users (`UserDirectory.knownUsers`).
        case knownUsers([String])
    }

    /// One row of `billing_event_parties`: a known user the event is linked to.
    struct Party: Sendable, Equatable {
        var userId: String
        var role: EventInbox.PartyRole
    }

    /// Rows of `billing_event_user_candidates`: ids the event waits for, in one role.
    struct Waiting: Sendable, Equatable {
        var ids: [String]
        var role: EventInbox.PartyRole
    }

    let event: StoreEvent
    let candidates: [String]
    let known: Set<String>
    /// The first known candidate: the user a non-transfer event is about.
    let subject: String?
    let status: EventInbox.Status
    /// `billing_events.status_reason` (an ignored event's why).
    let reason: String?
    /// `billing_events.user_id`: the user the row is about, nil while it waits.
    let owner: String?

    /// Every id the event names, in the order candidates, senders, receivers.
    static func ids(of event: StoreEvent, candidates: [String]) -> [String] {
        candidates + event.transferredFrom + event.transferredTo
    }

    /// What to read first.
    static func lookup(for event: StoreEvent, candidates: [String]) -> Lookup {
        let all = ids(of: event, candidates: candidates)
        if event.isApplicable, event.kind != .transfer, let preferred = candidates.first {
            return .lockPreferred(preferred, otherwise: all)
        }
        return .knownUsers(all)
    }

    /// - Parameter known: which ids the lookup found known (the preferred candidate alone
    ///   when his locking read found him).
    init(event: StoreEvent, candidates: [String], known: Set<String>) {
        self.event = event
        self.candidates = candidates
        self.known = known
        subject = candidates.first(where: known.contains)
        let senders = event.transferredFrom.filter(known.contains)
        let receivers = event.transferredTo.filter(known.contains)
        if !event.isApplicable {
            status = .ignored
            reason =
                event.kind == .test
                ? "test"
                : event.kind == .unknown ? "unknown_type" : event.kind.isInformational ? "informational" : "no_timestamp"
            owner = subject
        } else if event.kind == .transfer {
            let to = receivers.first ?? senders.first
            status = to == nil ? .unmatched : .applied
            reason = nil
            owner = to
        } else {
            status = subject == nil ? .unmatched : .applied
            reason = nil
            owner = subject
        }
    }

    /// The ids whose erasure must be known before anything is written (`ErasedUsers.erased`):
    /// an erased id is never a candidate, and the payload does not keep it (SPEC §19). nil
    /// when no unknown id can end up stored (an applied or ignored event that is no
    /// transfer): the usual case asks nothing.
    var erasureCheck: [String]? {
        guard status == .unmatched || event.kind == .transfer else { return nil }
        return Self.ids(of: event, candidates: candidates).filter { !known.contains($0) }
    }

    /// What to write once the erased ids among `erasureCheck` are known.
    struct Writes: Sendable, Equatable {
        /// Erased ids to scrub from the stored payload (`StoredPayload.scrubbed`).
        var scrub: Set<String>
        /// `billing_events.user_id` (nil for an event that waits).
        var owner: String?
        var parties: [Party]
        var waiting: [Waiting]
        /// A confirmed purchase resets the user's offer ladders (SPEC §14), by either provider.
        var ladderReset: (userId: String, at: Timestamp)?
        /// The users to re-fold, in the lock order (`UserLock.order`).
        var fold: [String]

        static func == (a: Writes, b: Writes) -> Bool {
            a.scrub == b.scrub && a.owner == b.owner && a.parties == b.parties && a.waiting == b.waiting
                && a.ladderReset?.userId == b.ladderReset?.userId && a.ladderReset?.at == b.ladderReset?.at && a.fold == b.fold
        }
    }

    /// What to write, given which of `erasureCheck`'s ids were erased (any other id in
    /// `erased` is not one the decision asked about, and changes nothing).
    func writes(erased: Set<String>) -> Writes {
        let erased = erased.intersection(erasureCheck ?? [])
        let waiting = { (ids: [String]) in ids.filter { !known.contains($0) && !erased.contains($0) } }
        let scrub = erased
        var result = Writes(scrub: scrub, owner: status == .unmatched ? nil : owner, parties: [], waiting: [], ladderReset: nil, fold: [])
        switch status {
        case .applied where event.kind == .transfer:
            let senders = event.transferredFrom.filter(known.contains)
            let receivers = event.transferredTo.filter(known.contains)
            result.parties = senders.map { Party(userId: $0, role: .transferFrom) } + receivers.map { Party(userId: $0, role: .transferTo) }
            result.waiting = [
                Waiting(ids: waiting(event.transferredFrom), role: .transferFrom), Waiting(ids: waiting(event.transferredTo), role: .transferTo),
            ]
            result.fold = UserLock.order(senders + receivers)
        case .applied:
            let subject = subject!
            result.parties = [Party(userId: subject, role: .subject)]
            result.fold = [subject]
            if event.kind == .purchase || event.kind == .nonRenewingPurchase, let at = event.purchasedAt ?? event.intrinsicAt {
                result.ladderReset = (subject, at)
            }
        case .unmatched where event.kind == .transfer:
            result.waiting = [
                Waiting(ids: waiting(event.transferredFrom), role: .transferFrom), Waiting(ids: waiting(event.transferredTo), role: .transferTo),
            ]
        case .unmatched:
            result.waiting = [Waiting(ids: waiting(candidates), role: .subject)]
        case .ignored, .failed:
            break
        }
        result.waiting.removeAll { $0.ids.isEmpty }
        return result
    }

    /// The event a user's fold may append incrementally (`AccessProjector.refold`'s
    /// `newEvent`): none for a transfer, which moves subscriptions between folds.
    var foldedEvent: StoreEvent? { event.kind == .transfer ? nil : event }

    /// A transfer moves what its sender had before it. When one of the sender's earlier
    /// events arrives after the transfer, the receivers must fold again too, or arrival
    /// order would decide what they get. The senders to ask about
    /// (`AccessProjector.transferReceivers`), given when the subject last gave his store
    /// access away (his fold's `lastTransferOutAt`): the common case asks nothing.
    func inheritingSenders(subjectLastTransferOutAt last: Timestamp?) -> (senders: [String], after: Timestamp)? {
        guard event.kind != .transfer, event.isApplicable, let at = event.intrinsicAt else { return nil }
        switch status {
        case .applied: if subject != nil, let last, last > at { return ([subject!], at) }
        case .unmatched: return (candidates, at)
        case .ignored, .failed: break
        }
        return nil
    }

    /// The receivers found by `inheritingSenders`' query that were not folded already, in
    /// the order they are folded. (They are locked after the sender, outside the sorted
    /// order; a rare deadlock this makes is retried.)
    static func lateReceivers(_ receivers: [String], folded: [String]) -> [String] {
        Set(receivers).subtracting(folded).sorted()
    }

    /// The ids to claim for after commit when the event was stored waiting: a user who
    /// became known between the lookup and the commit has already looked for his unmatched
    /// events and not seen this one.
    static func claimIds(of event: StoreEvent, candidates: [String]) -> [String] {
        ids(of: event, candidates: candidates)
    }
}
