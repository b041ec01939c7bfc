import Testing

@testable import Core

/// The stored fold (billing_subscription_folds): folding a subscription's events in one go, or
/// folding a prefix, storing the fold as JSON, reading it back and folding the rest, gives the
/// same states and the same classification for the counts (billing_counted_events), at every
/// split point of random event sequences; when the stored fold forgot a period key an event
/// names, it says so (the subscription is then derived again whole).
@Suite struct SubscriptionStatesTests {
    @Test(arguments: 0..<60)
    func foldingOnFromAStoredFoldEqualsFoldingAll(seed: Int) throws {
        var random = XorShift(seed: UInt64(seed) &+ 0xF01D)
        let kinds =
            Array(SubscriptionStates.periodStartKinds.union(SubscriptionStates.lostKinds).union(SubscriptionStates.renewalIntentKinds))
            .sorted() + ["billing_issue", "product_change"]
        var events: [SubscriptionStates.Event] = []
        var at: Int64 = 1_767_225_600_000
        // Every third sequence is long enough for the stored fold to forget period keys.
        for n in 0..<(1 + random.next(seed % 3 == 0 ? 150 : 14)) {
            at += Int64(random.next(3)) * Int64(random.next(20)) * SubscriptionStates.day
            func maybe(_ v: Int64) -> Int64? { random.next(3) == 0 ? nil : v }
            let kind = kinds[random.next(kinds.count)]
            events.append(
                SubscriptionStates.Event(
                    id: UInt64(n + 1), at: at, kind: kind, countedKind: kind, userId: random.next(4) == 0 ? nil : "u",
                    productId: ["a", "b", nil][random.next(3)], isTrial: random.next(4) == 0, familyShared: random.next(6) == 0,
                    priceMilli: maybe(Int64(random.next(3)) * 4_990), currency: ["EUR", "USD", nil][random.next(3)],
                    // A third name an earlier event's period (a twin, a refund of an old period).
                    purchasedAt: n > 0 && random.next(3) == 0
                        ? events[random.next(n)].purchasedAt : maybe(at - Int64(random.next(40)) * SubscriptionStates.day),
                    expiresAt: maybe(at + Int64(random.next(40)) * SubscriptionStates.day),
                    graceExpiresAt: random.next(4) == 0 ? at + Int64(random.next(50)) * SubscriptionStates.day : nil,
                    willRenew: [nil, true, false][random.next(3)],
                    userCreatedAt: random.next(3) == 0 ? nil : at - Int64(random.next(90) - 10) * SubscriptionStates.day))
        }
        let replacedAt: Int64? = random.next(3) == 0 ? at - Int64(random.next(30)) * SubscriptionStates.day : nil
        var all = SubscriptionStates.Fold(replacedAt: replacedAt)
        let whole = all.fold(events)
        var forgot = 0
        for split in 0...events.count {
            var fold = SubscriptionStates.Fold(replacedAt: replacedAt)
            var states = events[..<split].compactMap { fold.add($0) }
            var counted = events[..<split].compactMap { fold.counts.classify($0) }
            fold.counts.forgetOldPeriods()
            let stored = try #require(SubscriptionStates.Fold(json: JSON.parse(fold.json.serializedString())))
            #expect(stored == fold, "seed \(seed) split \(split)")
            let rest = Array(events[split...])
            guard stored.counts.canClassify(rest) else {
                // Only when an event names a key older than the kept ones, and not kept.
                let kept = stored.counts.periods
                #expect(
                    rest.contains { e in
                        SubscriptionStates.CountFold.group(e.kind) != 0 && kept[e.purchasedAt ?? e.at] == nil
                            && (e.purchasedAt ?? e.at) <= stored.counts.forgottenUpTo!
                    }, "seed \(seed) split \(split)")
                forgot += 1
                continue
            }
            var resumed = stored
            let folded = resumed.fold(rest)
            states += folded.states
            for i in states.indices {
                states[i].firstPaidAt = resumed.firstPaid
                states[i].cohortPaidAt = resumed.counts.paidAt
            }
            counted += folded.counted
            #expect(states == whole.states, "seed \(seed) split \(split)")
            #expect(counted == whole.counted, "seed \(seed) split \(split)")
        }
        // Some splits of the long sequences fold on after forgetting, and still agree.
        if events.count > 100 { #expect(forgot < events.count) }
        #expect(SubscriptionStates.Fold(json: ["cancelling": "no"]) == nil)
    }
}

/// A deterministic generator for the random sequences (xorshift64*).
private struct XorShift {
    var state: UInt64
    init(seed: UInt64) { state = seed | 1 }
    mutating func next(_ bound: Int) -> Int {
        state ^= state >> 12
        state ^= state << 25
        state ^= state >> 27
        return Int((state &* 0x2545_F491_4F6C_DD1D) % UInt64(bound))
    }
}
