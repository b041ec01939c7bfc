import Testing

@testable import Core

/// `IngestionDecision` over every combination, without a database: each kind of event
/// (applicable, transfer, ignored for each reason), each ordering of subject candidates,
/// each set of known users and each set of erased ids among the rest. The rules are checked
/// as rules (who is linked, who waits, who folds, what is scrubbed), not as one sequence.
struct IngestionDecisionTests {
    private static let t0 = Timestamp(CivilDateTime(year: 2026, month: 3, day: 1))
    private static let purchased = t0.adding(seconds: -3600)

    /// An event of `kind` at t0 (nil time for `untimed`), naming `from`/`to` for a transfer.
    private static func event(
        _ kind: EventKind, provider: EventProvider = .revenuecat, untimed: Bool = false,
        from: [String] = [], to: [String] = []
    ) -> StoreEvent {
        StoreEvent(
            provider: provider, providerEventId: "e-\(kind.rawValue)", rawType: kind.rawValue.uppercased(), kind: kind,
            intrinsicAt: untimed ? nil : t0, subscriptionId: "otid-1", productId: "plus.monthly", tier: .plus,
            purchasedAt: kind == .purchase ? purchased : nil, expiresAt: t0.adding(seconds: 30 * 86_400),
            transferredFrom: from, transferredTo: to)
    }

    /// Every kind of event the decision tells apart, with the reason an ignored one carries.
    private static let events: [(event: StoreEvent, ignoredBecause: String?)] = [
        (event(.purchase), nil), (event(.renewal), nil), (event(.nonRenewingPurchase), nil), (event(.expiration), nil),
        (event(.refundDeclined, provider: .appleNotification), nil),
        (event(.unknown, provider: .appleNotification), nil),
        (event(.refundDeclined), "informational"), (event(.unknown), "unknown_type"), (event(.test), "test"),
        (event(.renewal, untimed: true), "no_timestamp"),
    ]

    private static let transfers: [StoreEvent] = [
        event(.transfer, from: ["s1"], to: ["r1"]), event(.transfer, from: ["s1", "s2"], to: ["r1"]),
        event(.transfer, from: [], to: ["r1", "r2"]), event(.transfer, from: ["s1"], to: []),
    ]

    private static let candidateOrders: [[String]] = [[], ["a"], ["a", "b"], ["b", "a"]]

    private static func subsets<T>(_ items: [T]) -> [[T]] {
        (0..<(1 << items.count)).map { mask in items.enumerated().filter { mask & (1 << $0.offset) != 0 }.map(\.element) }
    }

    /// Every (event, candidates, known, erased) the rules cover.
    private static func everyCase() -> [(StoreEvent, [String], Set<String>, Set<String>)] {
        var cases: [(StoreEvent, [String], Set<String>, Set<String>)] = []
        let all = events.map(\.event) + transfers
        for event in all {
            for candidates in candidateOrders {
                let ids = Array(Set(IngestionDecision.ids(of: event, candidates: candidates))).sorted()
                for known in subsets(ids) {
                    for erased in subsets(ids.filter { !known.contains($0) }) {
                        cases.append((event, candidates, Set(known), Set(erased)))
                    }
                }
            }
        }
        return cases
    }

    @Test func statusSubjectAndOwnerFollowWhoIsKnown() {
        var count = 0
        for (event, candidates, known, _) in Self.everyCase() {
            count += 1
            let d = IngestionDecision(event: event, candidates: candidates, known: known)
            let why = "\(event.kind) candidates \(candidates) known \(known.sorted())"
            #expect(d.subject == candidates.first(where: known.contains), "\(why)")
            if let reason = Self.events.first(where: { $0.event == event })?.ignoredBecause {
                #expect(d.status == .ignored && d.reason == reason && d.owner == d.subject, "\(why)")
            } else if event.kind == .transfer {
                let receiver = event.transferredTo.first(where: known.contains) ?? event.transferredFrom.first(where: known.contains)
                #expect(d.status == (receiver == nil ? .unmatched : .applied) && d.owner == receiver && d.reason == nil, "\(why)")
            } else {
                #expect(d.status == (d.subject == nil ? .unmatched : .applied) && d.owner == d.subject && d.reason == nil, "\(why)")
            }
        }
        #expect(count > 500, "the combinations are enumerated")
    }

    @Test func onlyKnownUsersAreLinkedAndFoldedAndOnlyTheRestWait() {
        for (event, candidates, known, erased) in Self.everyCase() {
            let d = IngestionDecision(event: event, candidates: candidates, known: known)
            let w = d.writes(erased: erased)
            let why = "\(event.kind) candidates \(candidates) known \(known.sorted()) erased \(erased.sorted())"
            let waitingIds = w.waiting.flatMap(\.ids)
            // Who is linked: known users only, in the role the event gives them.
            #expect(w.parties.allSatisfy { known.contains($0.userId) }, "\(why)")
            #expect(waitingIds.allSatisfy { !known.contains($0) && !erased.contains($0) }, "an id waits only when unknown and not erased: \(why)")
            #expect(w.waiting.allSatisfy { !$0.ids.isEmpty }, "\(why)")
            #expect(w.owner == (d.status == .unmatched ? nil : d.owner), "\(why)")
            // The users folded are exactly those linked, each once, in the lock order.
            #expect(w.fold == UserLock.order(w.parties.map(\.userId)), "\(why)")
            #expect(w.fold == w.fold.sorted() && Set(w.fold).count == w.fold.count, "\(why)")
            switch d.status {
            case .applied where event.kind == .transfer:
                let expected =
                    event.transferredFrom.filter(known.contains).map { IngestionDecision.Party(userId: $0, role: .transferFrom) }
                    + event.transferredTo.filter(known.contains).map { IngestionDecision.Party(userId: $0, role: .transferTo) }
                #expect(w.parties == expected, "\(why)")
                #expect(
                    Set(waitingIds) == Set((event.transferredFrom + event.transferredTo).filter { !known.contains($0) && !erased.contains($0) }),
                    "\(why)")
                #expect(w.waiting.allSatisfy { $0.role != .subject }, "\(why)")
            case .applied:
                #expect(w.parties == [IngestionDecision.Party(userId: d.subject!, role: .subject)] && w.waiting.isEmpty, "\(why)")
            case .unmatched:
                #expect(w.parties.isEmpty && w.fold.isEmpty, "\(why)")
                let named = event.kind == .transfer ? event.transferredFrom + event.transferredTo : candidates
                #expect(Set(waitingIds) == Set(named.filter { !erased.contains($0) }), "every id it names but the erased waits: \(why)")
                #expect(w.waiting.allSatisfy { ($0.role == .subject) == (event.kind != .transfer) }, "\(why)")
            case .ignored, .failed:
                #expect(w.parties.isEmpty && w.waiting.isEmpty && w.fold.isEmpty, "an ignored event links, waits for and folds nobody: \(why)")
            }
        }
    }

    @Test func erasedIdsAreAskedAboutOnlyWhenTheyCouldBeStoredAndAreScrubbed() {
        for (event, candidates, known, erased) in Self.everyCase() {
            let d = IngestionDecision(event: event, candidates: candidates, known: known)
            let why = "\(event.kind) candidates \(candidates) known \(known.sorted())"
            let unknown = IngestionDecision.ids(of: event, candidates: candidates).filter { !known.contains($0) }
            if d.status == .unmatched || event.kind == .transfer {
                #expect(d.erasureCheck == unknown, "\(why)")
            } else {
                #expect(d.erasureCheck == nil, "an applied or ignored event that is no transfer stores no unknown id: \(why)")
            }
            if d.erasureCheck != nil { #expect(d.writes(erased: erased).scrub == erased, "\(why)") }
        }
    }

    @Test func theFastPathDecidesWhatTheFullLookupDecides() {
        // When the preferred candidate is known, the ingestion looks up only him (one
        // locking read). Whatever else is known, the writes must be the same.
        for (event, candidates, known, erased) in Self.everyCase() {
            guard case .lockPreferred(let preferred, let otherwise) = IngestionDecision.lookup(for: event, candidates: candidates) else {
                #expect(!event.isApplicable || event.kind == .transfer || candidates.isEmpty)
                continue
            }
            #expect(preferred == candidates.first && otherwise == IngestionDecision.ids(of: event, candidates: candidates))
            guard known.contains(preferred) else { continue }
            let full = IngestionDecision(event: event, candidates: candidates, known: known)
            let fast = IngestionDecision(event: event, candidates: candidates, known: [preferred])
            #expect(fast.status == full.status && fast.subject == full.subject && fast.owner == full.owner)
            #expect(fast.erasureCheck == nil && full.erasureCheck == nil)
            #expect(fast.writes(erased: []) == full.writes(erased: erased), "\(event.kind) candidates \(candidates) known \(known.sorted())")
        }
    }

    @Test func aConfirmedPurchaseResetsTheSubjectsLadders() {
        for (event, candidates, known, erased) in Self.everyCase() {
            let d = IngestionDecision(event: event, candidates: candidates, known: known)
            let reset = d.writes(erased: erased).ladderReset
            if d.status == .applied, event.kind == .purchase || event.kind == .nonRenewingPurchase {
                #expect(reset?.userId == d.subject && reset?.at == (event.purchasedAt ?? event.intrinsicAt))
            } else {
                #expect(reset == nil, "\(event.kind) \(d.status)")
            }
        }
    }

    @Test func aLateEventOfASenderAsksForTheReceivers() {
        let earlier = Self.t0.adding(seconds: -60)
        let later = Self.t0.adding(seconds: 60)
        for (event, candidates, known, _) in Self.everyCase() {
            let d = IngestionDecision(event: event, candidates: candidates, known: known)
            for last in [nil, earlier, Self.t0, later] {
                let asked = d.inheritingSenders(subjectLastTransferOutAt: last)
                let why = "\(event.kind) \(d.status) last transfer out \(String(describing: last))"
                if event.kind == .transfer || !event.isApplicable {
                    #expect(asked == nil, "\(why)")
                } else if d.status == .unmatched {
                    #expect(asked?.senders == candidates && asked?.after == Self.t0, "a waiting event may be a sender's: \(why)")
                } else if last == later {
                    #expect(asked?.senders == [d.subject!] && asked?.after == Self.t0, "the subject gave away what this event changes: \(why)")
                } else {
                    #expect(asked == nil, "nothing the subject gave away came after this event: \(why)")
                }
            }
            #expect(d.foldedEvent == (event.kind == .transfer ? nil : event))
        }
        #expect(IngestionDecision.lateReceivers(["r2", "r1", "r2", "s1"], folded: ["s1"]) == ["r1", "r2"])
    }

    @Test func oneTransferExactly() {
        let transfer = Self.event(.transfer, from: ["s1", "s2"], to: ["r1", "r2"])
        let d = IngestionDecision(event: transfer, candidates: [], known: ["s2", "r2"])
        #expect(d.status == .applied && d.owner == "r2")
        #expect(d.erasureCheck == ["s1", "r1"])
        let w = d.writes(erased: ["r1"])
        #expect(w.parties == [.init(userId: "s2", role: .transferFrom), .init(userId: "r2", role: .transferTo)])
        #expect(w.waiting == [.init(ids: ["s1"], role: .transferFrom)])
        #expect(w.fold == ["r2", "s2"] && w.scrub == ["r1"])
    }
}
