import Testing

@testable import Core

/// The stored fold (billing_subscription_folds): folding a subscription's events in one go, or
/// folding a prefix, storing the fold as JSON, reading it back and folding the rest, gives the
/// same states, at every split point of random event sequences.
@Suite struct SubscriptionStatesTests {
    @Test(arguments: 0..<40)
    func foldingOnFromAStoredFoldEqualsFoldingAll(seed: Int) throws {
        var random = XorShift(seed: UInt64(seed) &+ 0xF01D)
        let kinds =
            Array(SubscriptionStates.periodStartKinds.union(SubscriptionStates.lostKinds).union(SubscriptionStates.renewalIntentKinds))
            .sorted() + ["billing_issue", "product_change"]
        var events: [SubscriptionStates.Event] = []
        var at: Int64 = 1_767_225_600_000
        for n in 0..<(1 + random.next(14)) {
            at += Int64(random.next(3)) * Int64(random.next(20)) * SubscriptionStates.day
            func maybe(_ v: Int64) -> Int64? { random.next(3) == 0 ? nil : v }
            events.append(
                SubscriptionStates.Event(
                    id: UInt64(n + 1), at: at, kind: kinds[random.next(kinds.count)], userId: random.next(4) == 0 ? nil : "u",
                    productId: ["a", "b", nil][random.next(3)], isTrial: random.next(4) == 0, familyShared: random.next(6) == 0,
                    priceMilli: maybe(Int64(random.next(3)) * 4_990), currency: ["EUR", "USD", nil][random.next(3)],
                    purchasedAt: maybe(at - Int64(random.next(40)) * SubscriptionStates.day),
                    expiresAt: maybe(at + Int64(random.next(40)) * SubscriptionStates.day),
                    graceExpiresAt: random.next(4) == 0 ? at + Int64(random.next(50)) * SubscriptionStates.day : nil,
                    willRenew: [nil, true, false][random.next(3)]))
        }
        let replacedAt: Int64? = random.next(3) == 0 ? at - Int64(random.next(30)) * SubscriptionStates.day : nil
        let whole = SubscriptionStates.states(of: events, replacedAt: replacedAt)
        for split in 0...events.count {
            var fold = SubscriptionStates.Fold(replacedAt: replacedAt)
            var states = events[..<split].compactMap { fold.add($0) }
            let stored = try #require(SubscriptionStates.Fold(json: JSON.parse(fold.json.serializedString())))
            #expect(stored == fold, "seed \(seed) split \(split)")
            var resumed = stored
            states += events[split...].compactMap { resumed.add($0) }
            if let open = resumed.open { states.append(open) }
            for i in states.indices { states[i].firstPaidAt = resumed.firstPaid }
            #expect(states == whole, "seed \(seed) split \(split)")
        }
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
