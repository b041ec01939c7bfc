import Foundation
import Testing

@testable import Core

/// The rule of the MRR movement (docs/stats.md, "MRR movement") over the random inboxes and
/// rates of `StatsCountsRuleTests`: what `stats.subscriptions` streams from one pivot query
/// equals a plain reference — each snapshot's paying subscriptions read on their own, joined
/// by id in a dictionary, each side's monthly amount converted with the rates read one by one
/// from the table in floating point — to within a milli-unit per kind, with the same number
/// of subscriptions per kind; and the six kinds sum to the MRR change exactly.
@Suite struct StatsMovementRuleTests {
    struct Side {
        var currency: String
        var day: Timestamp
        var price: Int64
    }

    @Test(arguments: 0..<12)
    func streamedMovementEqualsTheReference(seed: Int) throws {
        try withStatsDatabase { db in
            var random = SplitMix(seed: UInt64(seed) &+ 0x00D0_7E11)
            try StatsCountsRuleTests.loadRandomInbox(&random, subscriptions: 4 + seed % 5, on: db)
            try Self.loadRandomSubscriptions(&random, count: 30 + seed, on: db)
            try StatsCountsRuleTests.loadRandomRates(&random, on: db)
            let now = Timestamp(iso8601: "2026-04-10T00:00:00Z")!
            for currency in ["EUR", "USD", "GBP"] {
                let q = SubscriptionStats.Query(
                    from: StatsCountsRuleTests.from, to: StatsCountsRuleTests.to, environment: .production, currency: currency)
                let r = try SubscriptionStats.compute(q, now: now, cadence: { _ in .monthly }, on: db)
                let m = r["mrrMovement"]!
                let kinds = ["new", "reactivation", "expansion", "contraction", "churned", "fx"]
                let sum = kinds.reduce(Int64(0)) { $0 + m[$1]!.int64Value! }
                #expect(
                    sum == r["snapshots"]!["end"]!["mrrMilli"]!.int64Value! - r["snapshots"]!["start"]!["mrrMilli"]!.int64Value!,
                    "seed \(seed) \(currency)")
                let reference = try Self.reference(q, at: [q.from, q.to], on: db)
                for kind in ["new", "reactivation", "expansion", "contraction", "churned"] {
                    let got = Double(m[kind]!.int64Value!)
                    #expect(abs(got - reference.amounts[kind, default: 0]) <= 1, "seed \(seed) \(currency) \(kind): \(got) vs \(reference)")
                    #expect(m["subscriptions"]![kind]?.int64Value == reference.counts[kind, default: 0], "seed \(seed) \(currency) \(kind)")
                }
                #expect(m["subscriptions"]!["atStart"]?.int64Value == reference.counts["atStart", default: 0], "seed \(seed)")
            }
        }
    }

    /// Subscriptions that behave like subscriptions: monthly periods one after the other,
    /// some with a trial first, a price and a currency that sometimes change at a renewal,
    /// lapses (then a purchase again on the same id: a reactivation), and now and then an
    /// expiration or a refund at the end, all around the two snapshots.
    static func loadRandomSubscriptions(_ random: inout SplitMix, count: Int, on db: DatabaseConnection) throws {
        let day: Int64 = 86_400_000
        let first = Timestamp(iso8601: "2025-12-20T00:00:00Z")!
        var n = 0
        for s in 0..<count {
            var at = first.adding(milliseconds: Int64(random.next(100)) * day + Int64(random.next(86_400)) * 1000)
            var currency = ["EUR", "USD", "GBP", "JPY"][random.next(4)]
            var price: Int64 = [4_990, 9_990, 14_990][random.next(3)]
            var previous: Timestamp?
            for period in 0..<(1 + random.next(5)) {
                if random.next(6) == 0 { currency = ["EUR", "USD", "GBP"][random.next(3)] }
                if random.next(3) == 0 { price = [4_990, 9_990, 14_990][random.next(3)] }
                let lapsed = period > 0 && random.next(4) == 0
                if lapsed { at = at.adding(milliseconds: Int64(10 + random.next(40)) * day) }
                var row = StatsFixture.Row(
                    kind: period == 0 || lapsed ? "purchase" : "renewal", sub: "M\(s)", at: at.iso8601)
                row.trial = period == 0 && random.next(4) == 0
                row.price = row.trial ? 0 : price
                row.currency = currency
                row.purchased = at.iso8601
                row.expires = at.adding(milliseconds: 30 * day).iso8601
                row.user = "MU\(s)"
                row.familyShared = s % 11 == 10
                n += 1
                try StatsFixture.insert(row, id: "m-\(n)", on: db)
                previous = at
                at = at.adding(milliseconds: 30 * day)
            }
            if let previous, random.next(5) == 0 {
                var end = StatsFixture.Row(kind: ["expiration", "refund"][random.next(2)], sub: "M\(s)", at: at.iso8601)
                end.purchased = previous.iso8601
                end.expires = at.iso8601
                end.price = -price
                end.currency = currency
                end.user = "MU\(s)"
                n += 1
                try StatsFixture.insert(end, id: "m-\(n)", on: db)
            }
        }
        // Yearly periods bought on a few days before the window and running past it: the same
        // state at both instants, several alike (one product, price, currency and purchase
        // day), some cancelled or refunded within the window.
        for y in 0..<(4 + random.next(6)) {
            let at = first.adding(milliseconds: Int64(random.next(3)) * day + Int64(y) * 3_600_000)
            var row = StatsFixture.Row(kind: "purchase", sub: "Y\(y)", at: at.iso8601)
            row.price = [49_990, 99_990][random.next(2)]
            row.currency = ["EUR", "USD"][random.next(2)]
            row.purchased = at.iso8601
            row.expires = at.adding(milliseconds: 365 * day).iso8601
            row.user = "YU\(y)"
            n += 1
            try StatsFixture.insert(row, id: "m-\(n)", on: db)
            if random.next(4) == 0 {
                let endAt = Timestamp(iso8601: "2026-03-10T00:00:00Z")!.adding(milliseconds: Int64(random.next(86_400)) * 1000)
                var end = StatsFixture.Row(kind: ["expiration", "refund"][random.next(2)], sub: "Y\(y)", at: endAt.iso8601)
                end.purchased = at.iso8601
                end.expires = endAt.iso8601
                end.price = -(row.price ?? 0)
                end.currency = row.currency
                end.user = row.user
                n += 1
                try StatsFixture.insert(end, id: "m-\(n)", on: db)
            }
        }
    }

    /// The movement, the slow and plain way.
    static func reference(
        _ q: SubscriptionStats.Query, at instants: [Timestamp], on db: DatabaseConnection
    ) throws -> (amounts: [String: Double], counts: [String: Int64]) {
        var sides: [[String: Side]] = []
        for t in instants {
            var paying: [String: Side] = [:]
            for row in try db.query(
                """
                SELECT z.subscription_id, COALESCE(pe.currency, 'XXX') AS currency,
                  COALESCE(pe.purchased_at, pe.intrinsic_at) AS purchased, pe.price_milli
                \(SubscriptionStats.derivedActiveSubscriptions(at: t, environment: q.environment.rawValue))
                  AND \(unsafeRaw: SubscriptionStats.derivedPaidPeriod)
                """)
            {
                paying[try row.string("subscription_id")] = Side(
                    currency: try row.string("currency"), day: try row.timestamp("purchased"), price: try row.int64("price_milli"))
            }
            sides.append(paying)
        }
        func rate(_ currency: String, _ t: Timestamp) throws -> Double? {
            if currency == "EUR" { return 1 }
            let row = try db.queryOne(
                """
                SELECT per_eur FROM billing_exchange_rates WHERE currency = \(currency) AND rate_date <= DATE(\(t))
                ORDER BY rate_date DESC LIMIT 1
                """)
            return try row.map { Double(try $0.string("per_eur"))! }
        }
        func value(_ s: Side, at t: Timestamp) throws -> Double? {
            if s.currency == q.currency { return Double(s.price) }
            guard s.currency != "XXX", let from = try rate(s.currency, t), let to = try rate(q.currency, t) else { return nil }
            return Double(s.price) * to / from
        }
        var amounts: [String: Double] = [:]
        var counts: [String: Int64] = [:]
        for id in Set(sides[0].keys).union(sides[1].keys).sorted() {
            let before = sides[0][id]
            let after = sides[1][id]
            let m0 = try before.flatMap { try value($0, at: $0.day) }
            let m1 = try after.flatMap { try value($0, at: $0.day) }
            if let m0, m0 != 0 { counts["atStart", default: 0] += 1 }
            if let b = before, let a = after {
                guard let m0, m1 != nil else { continue }
                let change = (try value(a, at: b.day) ?? m1!) - m0
                if change != 0 {
                    let kind = change > 0 ? "expansion" : "contraction"
                    amounts[kind, default: 0] += change
                    counts[kind, default: 0] += 1
                }
            } else if let m1, m1 != 0 {
                let paidBefore =
                    try db.queryOne(
                        """
                        SELECT 1 AS yes FROM billing_events p
                        WHERE p.environment = \(q.environment.rawValue) AND p.subscription_id = \(id) AND p.intrinsic_at < \(q.from)
                          AND p.status IN ('applied', 'unmatched') AND p.kind IN ('purchase', 'renewal', 'non_renewing_purchase', 'subscriber_state')
                          AND p.is_trial = 0 AND p.family_shared = 0 AND p.price_milli > 0
                        LIMIT 1
                        """) != nil
                let kind = paidBefore ? "reactivation" : "new"
                amounts[kind, default: 0] += m1
                counts[kind, default: 0] += 1
            } else if let m0, m0 != 0 {
                amounts["churned", default: 0] -= m0
                counts["churned", default: 0] += 1
            }
        }
        return (amounts, counts)
    }
}
