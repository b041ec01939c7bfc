import Testing

@testable import Core

// The access route reuses a user's resolved quota plan (`QuotaResolution.Resolved`) instead
// of resolving it on every request. The rule: a reused plan is always the plan a fresh
// resolution gives at that instant. Proved over every combination of sources, plan version
// histories (versions taking effect before, inside and after a running window, out of
// number order) and instants around every window end and effective time.

private func hours(_ n: Int64) -> Timestamp {
    Timestamp(CivilDateTime(year: 2026, month: 1, day: 1)).adding(seconds: n * 3600)
}

@Suite struct QuotaPlanReuseTests {
    /// A contract whose limits and window lengths depend on `seed`, so that two versions
    /// differ in what a window rolling over or a version taking effect changes.
    static func contract(_ seed: Int) -> PlanContract {
        func meter(_ limit: Int?, days: Int) -> JSON {
            ["limit": limit.map { JSON.int(Int64($0)) } ?? .null, "window": ["days": .int(Int64(days))]]
        }
        let json: JSON = [
            "tiers": [
                "free": ["capabilities": ["explore"], "meters": ["gen": meter(1, days: 1 + seed % 3), "upload": meter(2, days: 7)]],
                "trial": [
                    "capabilities": ["explore", "remix"],
                    "meters": ["gen": ["limit": .int(Int64(1 + seed)), "window": "trial"], "upload": meter(3 + seed, days: 2)],
                ],
                "plus": [
                    "capabilities": ["explore", "remix"], "meters": ["gen": meter(2 + seed, days: 7 - seed % 4), "upload": meter(5, days: 30)],
                ],
                "pro": [
                    "capabilities": .array((["explore", "remix", "monitor"] + (seed % 2 == 0 ? [] : ["studio"])).map(JSON.string)),
                    "meters": ["gen": meter(seed % 2 == 0 ? nil : 9, days: 3), "upload": meter(10 + seed, days: 1 + seed % 5)],
                ],
            ]
        ]
        return try! PlanContract(json: json)
    }

    /// Version histories: one version; a second in force from inside the probed span; a
    /// third published later in number but effective earlier than the second.
    static let histories: [[PublishedPlan]] = [
        [PublishedPlan(version: 1, contract: contract(0), publishedAt: hours(-10_000))],
        [
            PublishedPlan(version: 1, contract: contract(0), publishedAt: hours(-10_000)),
            PublishedPlan(version: 2, contract: contract(1), publishedAt: hours(100)),
        ],
        [
            PublishedPlan(version: 1, contract: contract(0), publishedAt: hours(-10_000)),
            PublishedPlan(version: 2, contract: contract(2), publishedAt: hours(300)),
            PublishedPlan(version: 3, contract: contract(3), publishedAt: hours(170)),
        ],
    ]

    /// Sources alone and in pairs: paid tiers, a store trial (with its period), overlays.
    static let sourceSets: [[QuotaResolution.Source]] = {
        let single: [QuotaResolution.Source] = [
            QuotaResolution.Source(tier: .plus),
            QuotaResolution.Source(tier: .pro),
            QuotaResolution.Source(tier: .plus, isTrial: true, trialStartsAt: hours(20), trialEndsAt: hours(188)),
            QuotaResolution.Source(tier: .pro, isTrial: true, trialStartsAt: hours(-50), trialEndsAt: hours(118)),
        ]
        var sets: [[QuotaResolution.Source]] = [[]]
        for (i, a) in single.enumerated() {
            sets.append([a])
            for b in single[(i + 1)...] { sets.append([a, b]) }
        }
        return sets
    }()

    /// Resolved at each of several instants and offered at every later instant of a span
    /// crossing window ends and effective times (every hour, and a millisecond either side
    /// of each `changesAt`): whenever the resolution holds, it is what `plan` gives there.
    @Test(arguments: 0..<QuotaPlanReuseTests.histories.count)
    func aReusedPlanIsAlwaysTheFreshPlan(_ history: Int) {
        let plans = Self.histories[history]
        var reused = 0
        var renewed = 0
        for sources in Self.sourceSets {
            for anchor in [hours(-333), hours(5)] {
                var last: QuotaResolution.Resolved?
                for step in stride(from: Int64(-20), through: 420, by: 1) {
                    // The clock moves forward: this hour, then around the end of the last
                    // resolution when that falls before the next hour.
                    var instants = [hours(step)]
                    if let end = last?.changesAt, end.adding(milliseconds: -1) > hours(step), end < hours(step + 1) {
                        instants += [end.adding(milliseconds: -1), end, end.adding(milliseconds: 1)]
                    }
                    for now in instants {
                        let fresh = QuotaResolution.plan(sources: sources, plans: plans, anchor: anchor, now: now)
                        if let last, last.holds(sources: sources, plans: plans, anchor: anchor, now: now) {
                            #expect(
                                last.plan == fresh,
                                "history \(history), \(sources), anchor \(anchor), resolved at \(last.resolvedAt), reused at \(now)")
                            reused += 1
                        }
                        let (resolved, wasReused) = QuotaResolution.plan(
                            sources: sources, plans: plans, anchor: anchor, now: now,
                            reusing: last)
                        #expect(resolved.plan == fresh)
                        if !wasReused { renewed += 1 }
                        last = resolved
                    }
                }
            }
        }
        // Reuse is the common case and windows do roll over within the span.
        #expect(reused > 5 * renewed && renewed > Self.sourceSets.count * 2 * 3, "reused \(reused), renewed \(renewed)")
    }

    /// What the resolution was made from must all match: other sources, another sign-up,
    /// another set of versions, or an earlier clock reading resolve again.
    @Test func anyOtherInputResolvesAgain() {
        let plans = Self.histories[1]
        let sources = [QuotaResolution.Source(tier: .plus)]
        let (resolved, _) = QuotaResolution.plan(sources: sources, plans: plans, anchor: hours(0), now: hours(10), reusing: nil)
        #expect(resolved.holds(sources: sources, plans: plans, anchor: hours(0), now: hours(10)))
        #expect(!resolved.holds(sources: [QuotaResolution.Source(tier: .pro)], plans: plans, anchor: hours(0), now: hours(10)))
        #expect(!resolved.holds(sources: sources + [QuotaResolution.Source(tier: .plus)], plans: plans, anchor: hours(0), now: hours(10)))
        #expect(!resolved.holds(sources: sources, plans: plans, anchor: hours(1), now: hours(10)))
        #expect(!resolved.holds(sources: sources, plans: Self.histories[0], anchor: hours(0), now: hours(10)))
        #expect(!resolved.holds(sources: sources, plans: Self.histories[2], anchor: hours(0), now: hours(10)))
        #expect(!resolved.holds(sources: sources, plans: plans, anchor: hours(0), now: hours(10).adding(milliseconds: -1)))
        // Version 2 takes effect at hour 100: the resolution ends there at the latest.
        #expect(resolved.changesAt != nil && resolved.changesAt! <= hours(100))
    }
}
