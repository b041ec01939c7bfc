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
/// `stats.snapshots`' ranges (`SubscriptionStates.classPieces`): for random sets of instants
/// (daily, weekly, scattered over years) and every bounded class, the pieces' windows are in
/// order and disjoint, each piece spans at most max(31, 2^c) days, and every instant's own
/// window [t − 2^c days, t) is covered, and nothing but those windows.
@Suite struct ClassPiecesTests {
    @Test(arguments: 0..<40)
    func piecesPartTheInstantsWindows(seed: Int) {
        var random = XorShift(seed: UInt64(seed) &+ 0x9_1ECE)
        let day = SubscriptionStates.day
        let step = [day, 7 * day, 30 * day, 400 * day][seed % 4]
        var t: Int64 = 1_767_225_600_000
        var instants: [Timestamp] = []
        for _ in 0..<(1 + random.next(60)) {
            t += step / 2 + Int64(random.next(Int(step)))
            instants.append(Timestamp(millisecondsSinceEpoch: t))
        }
        for c in 0..<SubscriptionStates.unboundedClass {
            let length = (Int64(1) << c) * day
            let pieces = SubscriptionStates.classPieces(at: instants, spanClass: c)
            let windows = pieces.flatMap { $0 }
            let label = "seed \(seed) class \(c)"
            #expect(zip(windows, windows.dropFirst()).allSatisfy { $0.to <= $1.from }, "\(label): in order, apart")
            #expect(windows.allSatisfy { $0.from < $0.to }, "\(label)")
            for piece in pieces {
                let span = piece.last!.to.millisecondsSinceEpoch - piece.first!.from.millisecondsSinceEpoch
                #expect(span <= max(31 * day, length), "\(label): a piece spans \(span / day) days")
            }
            func covered(_ x: Int64) -> Bool {
                windows.contains { $0.from.millisecondsSinceEpoch <= x && x < $0.to.millisecondsSinceEpoch }
            }
            func wanted(_ x: Int64) -> Bool {
                instants.contains { $0.millisecondsSinceEpoch - length <= x && x < $0.millisecondsSinceEpoch }
            }
            // Every window's edges and a point inside each, against the instants' windows.
            var probes: [Int64] = []
            for w in windows {
                probes += [
                    w.from.millisecondsSinceEpoch - 1, w.from.millisecondsSinceEpoch, w.to.millisecondsSinceEpoch - 1, w.to.millisecondsSinceEpoch,
                ]
            }
            for i in instants {
                probes += [
                    i.millisecondsSinceEpoch - length - 1, i.millisecondsSinceEpoch - length, i.millisecondsSinceEpoch - 1, i.millisecondsSinceEpoch,
                ]
            }
            for x in probes { #expect(covered(x) == wanted(x), "\(label) at \(x)") }
        }
    }
}

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
