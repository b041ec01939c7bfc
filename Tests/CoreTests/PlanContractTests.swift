import Testing

@testable import Core

@Suite struct PlanContractTests {
    static let valid: JSON = [
        "tiers": [
            "free": ["capabilities": ["explorePlayback"], "meters": ["recurringGeneration": ["limit": 1, "window": ["days": 7]]]],
            "trial": ["capabilities": ["explorePlayback"], "meters": ["recurringGeneration": ["limit": 1, "window": "trial"]]],
            "plus": [
                "capabilities": ["explorePlayback", "remix"],
                "meters": ["recurringGeneration": ["limit": 2, "window": ["days": 7], "placement": "generation_limit"]],
            ],
            "pro": ["capabilities": ["explorePlayback", "remix"], "meters": ["recurringGeneration": ["limit": nil, "window": ["days": 7]]]],
        ]
    ]

    @Test func acceptsAValidContractAndRoundTrips() throws {
        let contract = try PlanContract(json: Self.valid)
        #expect(contract.tiers[.pro]?.meters["recurringGeneration"]?.limit == nil)
        #expect(contract.tiers[.trial]?.meters["recurringGeneration"]?.window == .trial)
        #expect(contract.tiers[.plus]?.meters["recurringGeneration"]?.placement == "generation_limit")
        #expect(try PlanContract(json: contract.json) == contract)
        #expect(contract.meterNames == ["recurringGeneration"])
    }

    @Test func refusesInvalidContractsNamingEveryProblem() {
        let cases: [(JSON, String)] = [
            ([:], "tiers"),
            (["tiers": ["free": ["capabilities": [], "meters": [:]]]], "tiers.trial"),
            (Self.replacing("free", ["capabilities": [1], "meters": [:]]), "tiers.free.capabilities[0]"),
            (Self.replacing("free", ["capabilities": [], "meters": ["m": ["limit": -1, "window": ["days": 7]]]]), "tiers.free.meters.m.limit"),
            (Self.replacing("free", ["capabilities": [], "meters": ["m": ["limit": 1, "window": ["days": 0]]]]), "tiers.free.meters.m.window"),
            (Self.replacing("free", ["capabilities": [], "meters": ["m": ["limit": 1, "window": "trial"]]]), "only in the trial tier"),
            (
                Self.replacing("free", ["capabilities": [], "meters": ["m": ["limit": 1, "window": ["days": 1], "bogus": 1]]]),
                "tiers.free.meters.m.bogus"
            ),
            (Self.replacing("gold", ["capabilities": [], "meters": [:]]), "tiers.gold: unknown tier"),
        ]
        for (json, fragment) in cases {
            do {
                _ = try PlanContract(json: json)
                Issue.record("accepted \(json)")
            } catch {
                #expect(error.description.contains(fragment), "\(error)")
            }
        }
    }

    static func replacing(_ tier: String, _ value: JSON) -> JSON {
        guard case .object(var root) = valid, case .object(var tiers)? = root["tiers"] else { return valid }
        tiers[tier] = value
        root["tiers"] = .object(tiers)
        return .object(root)
    }

    @Test func windowsAreAnchoredAtSignUpAndNeverBeforeIt() {
        let anchor = Timestamp(CivilDateTime(year: 2026, month: 3, day: 1, hour: 10))
        func w(_ hours: Int64) -> QuotaWindow {
            QuotaWindow.current(.days(7), anchor: anchor, now: anchor.adding(seconds: hours * 3600), trial: nil)
        }
        #expect(w(0) == QuotaWindow(start: anchor, end: anchor.adding(seconds: 7 * 86_400)))
        #expect(w(7 * 24 - 1).start == anchor)
        #expect(w(7 * 24).start == anchor.adding(seconds: 7 * 86_400))
        #expect(w(-5).start == anchor, "a clock reading before sign-up counts in the first window")
        let trial = QuotaWindow.current(.trial, anchor: anchor, now: anchor, trial: (anchor.adding(seconds: 60), anchor.adding(seconds: 3600)))
        #expect(trial == QuotaWindow(start: anchor.adding(seconds: 60), end: anchor.adding(seconds: 3600)))
    }

    @Test func versionInEffectAtAnInstant() throws {
        let contract = try PlanContract(json: Self.valid)
        let plans = [
            PublishedPlan(version: 1, contract: contract, publishedAt: Timestamp(secondsSinceEpoch: 100)),
            PublishedPlan(version: 2, contract: contract, publishedAt: Timestamp(secondsSinceEpoch: 200)),
        ]
        #expect(PlanCatalog.plan(in: plans, at: Timestamp(secondsSinceEpoch: 50)).version == 1)
        #expect(PlanCatalog.plan(in: plans, at: Timestamp(secondsSinceEpoch: 199)).version == 1)
        #expect(PlanCatalog.plan(in: plans, at: Timestamp(secondsSinceEpoch: 200)).version == 2)
    }

    @Test func balances() {
        let window = QuotaWindow(start: Timestamp(secondsSinceEpoch: 0), end: Timestamp(secondsSinceEpoch: 10))
        let b = MeterBalance(meter: "m", limit: 2, used: 1, window: window)
        #expect(b.remaining == 1 && b.allows(1) && !b.allows(2))
        #expect(MeterBalance(meter: "m", limit: nil, used: 99, window: window).allows(1_000))
        #expect(MeterBalance(meter: "m", limit: 1, used: 3, window: window).remaining == 0)
    }
}
