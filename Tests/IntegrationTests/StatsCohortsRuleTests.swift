import Foundation
import Testing

@testable import Core

/// The rule of `stats.cohorts` (docs/stats.md, "Cohorts") over random inboxes and rates:
/// what three queries and one folded scan give equals a plain reference — every event read
/// back and sorted here, the cohorts, sales and refunds found in dictionaries and sets, each
/// boundary's paying subscriptions read on their own, every amount converted in floating
/// point with rates looked up one by one — exactly for subscribers, retention and what has no
/// rate, and to within half a milli-unit per (currency, purchase day) converted for revenue.
@Suite struct StatsCohortsRuleTests {
    static let from = Timestamp(iso8601: "2026-01-01T00:00:00Z")!
    static let to = Timestamp(iso8601: "2026-06-01T00:00:00Z")!
    /// The reports' periods: whole months (the cohorts' sums alone); `to` within a day, after
    /// which some of May's subscriptions are first paid (the sums of `to`'s day read from its
    /// rows, the later members' earlier rows taken out); `from` within a month (every member's
    /// rows read, the later whole months' from the sums); both; `from` and `to` within one
    /// month.
    static let periods: [(from: Timestamp, to: Timestamp)] = [
        (from, to),
        (from, Timestamp(iso8601: "2026-03-05T19:00:00Z")!),
        (Timestamp(iso8601: "2026-01-15T06:00:00Z")!, to),
        (Timestamp(iso8601: "2026-02-03T10:30:00Z")!, Timestamp(iso8601: "2026-04-20T13:00:00Z")!),
        (Timestamp(iso8601: "2026-03-02T00:00:00Z")!, Timestamp(iso8601: "2026-03-28T08:00:00Z")!),
    ]

    struct Event {
        var id: Int64
        var kind: String
        var at: Timestamp
        var isTrial: Bool
        var isShared: Bool
        var price: Int64?
        var currency: String?
        var periodKey: Timestamp
    }

    @Test(arguments: 0..<10)
    func cohortsEqualTheReference(seed: Int) throws {
        try withStatsDatabase { db in
            var random = SplitMix(seed: UInt64(seed) &+ 0xC0_4027)
            // Refreshed at random points while the inbox arrives out of time order: the cohort's
            // first paid period is folded on as well as derived whole.
            try StatsCountsRuleTests.loadRandomInbox(&random, subscriptions: 5 + seed % 4, on: db) { random in
                if random.next(3) == 0 { try SubscriptionStates.refresh(on: db, now: Self.to) }
            }
            try StatsMovementRuleTests.loadRandomSubscriptions(&random, count: 25 + 2 * seed, on: db)
            try StatsCountsRuleTests.loadRandomRates(&random, on: db)
            // asOf before `to` for half the seeds: the last boundaries are not reached yet.
            let now = Timestamp(iso8601: seed % 2 == 0 ? "2026-07-01T00:00:00Z" : "2026-04-10T00:00:00Z")!
            // The cohorts' sums are the sums of the rows, whatever the order the refreshes saw.
            try SubscriptionStates.refresh(on: db, now: Self.to)
            #expect(try Self.cohortSums(fromTable: true, on: db) == Self.cohortSums(fromTable: false, on: db))
            #expect(try Self.cohortPaying(fromTable: true, on: db) == Self.cohortPaying(fromTable: false, on: db))
            let (from, to) = Self.periods[seed % Self.periods.count]
            let reference = try Self.reference(from: from, to: to, now: now, on: db)
            for currency in ["EUR", "USD"] {
                let q = SubscriptionStats.Query(from: from, to: to, environment: .production, currency: currency)
                let r = try SubscriptionStats.cohorts(q, now: now, on: db)
                let rows = r["cohorts"]!.arrayValue!
                #expect(
                    rows.map { $0["month"]!.stringValue! }
                        == ["2026-01", "2026-02", "2026-03", "2026-04", "2026-05"].filter {
                            $0 >= Self.monthText(from) && $0 <= Self.monthText(to.adding(milliseconds: -1))
                        })
                for row in rows {
                    let month = row["month"]!.stringValue!
                    let expected = reference.cohorts[month] ?? Reference.Cohort()
                    let label = "seed \(seed) [\(from.iso8601), \(to.iso8601)) \(currency) \(month)"
                    #expect(row["subscribers"]?.int64Value == Int64(expected.members.count), "\(label)")
                    let retention = row["retention"]!.arrayValue!
                    #expect(retention.first?["paying"]?.int64Value == Int64(expected.members.count), "\(label)")
                    #expect(retention.count == expected.reached, "\(label)")
                    for entry in retention.dropFirst() {
                        let k = Int(entry["index"]!.int64Value!)
                        #expect(entry["paying"]?.int64Value == expected.paying[k, default: 0], "\(label) index \(k)")
                    }
                    let money = try expected.revenue(in: currency, rates: reference.rate)
                    let gross = Double(row["grossMilli"]!.int64Value!)
                    let refunded = Double(row["refundedMilli"]!.int64Value!)
                    #expect(abs(gross - money.gross) <= money.tolerance, "\(label) gross \(gross) vs \(money.gross)")
                    #expect(abs(refunded - money.refunded) <= money.tolerance, "\(label) refunded \(refunded) vs \(money.refunded)")
                    #expect(row["unconverted"] == money.unconverted, "\(label)")
                    let net = row["revenueMilli"]!.int64Value!
                    #expect(net == row["grossMilli"]!.int64Value! - row["refundedMilli"]!.int64Value!, "\(label)")
                    let subscribers = Int64(expected.members.count)
                    #expect(
                        row["ltvMilli"]?.int64Value
                            == (subscribers == 0 ? 0 : Money.dividedRounded(Int128(net), by: Int128(subscribers))), "\(label)")
                }
            }
        }
    }

    /// The edges of the cohorts' sums, each with a subscription of its own (EUR, no rates):
    /// A sells a one-time period, is cancelled, then is first paid after `to` on `to`'s day,
    /// each folded by a refresh of its own: it joins March's cohort with its earlier sale when
    /// its first paid period is folded on, and that sale is not the report's (A is no member
    /// of it); B is first paid on `to`'s day before `to` (read from its rows); C in February
    /// (from the sums); D in March, refunded after `to` (not counted); F in January after the
    /// 15th, then renewed free: paying at February's first instant, not at March's (from the
    /// counts, or from its states when the report begins within January).
    @Test func theSumsEdgesAsComputedByHand() throws {
        try withStatsDatabase { db in
            var n = 0
            func add(_ r: StatsFixture.Row) throws {
                n += 1
                try StatsFixture.insert(r, id: "edge-\(n)", on: db)
                try SubscriptionStates.refresh(on: db, now: Self.to)
            }
            func purchase(_ sub: String, _ price: Int64, at: String, expires: String) throws {
                try add(.init(kind: "purchase", sub: sub, price: price, purchased: at, expires: expires, at: at, status: "unmatched"))
            }
            try add(
                .init(
                    kind: "promotional", sub: "A", price: 1_000, purchased: "2026-02-25T00:00:00Z", expires: "2026-04-03T00:00:00Z",
                    at: "2026-02-25T00:00:00Z", status: "unmatched"))
            try add(
                .init(
                    kind: "non_renewing_purchase", sub: "A", price: 5_000, purchased: "2026-03-02T10:00:00Z", at: "2026-03-02T10:00:00Z",
                    status: "unmatched"))
            try add(.init(kind: "cancellation", sub: "A", at: "2026-03-03T10:00:00Z", status: "unmatched"))
            try purchase("A", 9_000, at: "2026-03-05T20:00:00Z", expires: "2026-04-05T20:00:00Z")
            try purchase("B", 7_000, at: "2026-03-05T18:45:00Z", expires: "2026-04-05T18:45:00Z")
            try purchase("C", 3_000, at: "2026-02-10T12:00:00Z", expires: "2026-03-10T12:00:00Z")
            try add(
                .init(
                    kind: "renewal", sub: "C", price: 3_000, purchased: "2026-03-10T12:00:00Z", expires: "2026-04-10T12:00:00Z",
                    at: "2026-03-10T12:00:00Z", status: "unmatched"))
            try purchase("E", 50_000, at: "2026-02-20T00:00:00Z", expires: "2033-02-20T00:00:00Z")
            try purchase("D", 4_000, at: "2026-03-01T00:00:00Z", expires: "2026-04-01T00:00:00Z")
            try purchase("F", 2_000, at: "2026-01-20T00:00:00Z", expires: "2026-02-20T00:00:00Z")
            try add(
                .init(
                    kind: "renewal", sub: "F", price: 0, purchased: "2026-02-20T00:00:00Z", expires: "2026-03-20T00:00:00Z",
                    at: "2026-02-20T00:00:00Z", status: "unmatched"))
            try add(
                .init(kind: "refund", sub: "D", price: -4_000, purchased: "2026-03-01T00:00:00Z", at: "2026-03-06T00:00:00Z", status: "unmatched"))
            #expect(try Self.cohortSums(fromTable: true, on: db) == Self.cohortSums(fromTable: false, on: db))
            let to = Timestamp(iso8601: "2026-03-05T19:00:00Z")!
            let now = Timestamp(iso8601: "2026-07-01T00:00:00Z")!
            for from in [Self.from, Timestamp(iso8601: "2026-01-15T00:00:00Z")!] {
                let q = SubscriptionStats.Query(from: from, to: to, environment: .production, currency: "EUR")
                let rows = try SubscriptionStats.cohorts(q, now: now, on: db)["cohorts"]!.arrayValue!
                let figures = rows.map { r in
                    [
                        r["month"]!.stringValue!, "\(r["subscribers"]!.int64Value!)", "\(r["grossMilli"]!.int64Value!)",
                        "\(r["refundedMilli"]!.int64Value!)", Self.paying(r),
                    ]
                }
                #expect(
                    figures == [
                        ["2026-01", "1", "2000", "0", "1/1/0"], ["2026-02", "2", "53000", "0", "2/2"], ["2026-03", "2", "11000", "0", "2"],
                    ], "from \(from.iso8601)")
            }
            // Whole months: A is a member with its earlier sale, D's refund counts; E's seven
            // years are read from its state (longer than the counts hold).
            let q = SubscriptionStats.Query(from: Self.from, to: Self.to, environment: .production, currency: "EUR")
            let rows = try SubscriptionStats.cohorts(q, now: now, on: db)["cohorts"]!.arrayValue!
            #expect(rows[1]["grossMilli"] == 56_000)
            #expect(Self.paying(rows[1]) == "2/2/2/1/1")
            #expect(rows[2]["subscribers"] == 3)
            #expect([rows[2]["grossMilli"], rows[2]["refundedMilli"]] == [25_000, 4_000])
            #expect(Self.paying(rows[2]) == "3/2/0/0")
            #expect(try Self.cohortPaying(fromTable: true, on: db) == Self.cohortPaying(fromTable: false, on: db))
        }
    }

    /// A cohort's retention, its paying counts by index joined with "/".
    static func paying(_ cohort: JSON) -> String {
        cohort["retention"]!.arrayValue!.map { "\($0["paying"]!.int64Value!)" }.joined(separator: "/")
    }

    /// sql/028 sums the rows an inbox already has (classified by refreshes in any order before
    /// the upgrade: the table dropped and the migration applied again), and the refreshes
    /// after it keep the sums equal to the rows.
    @Test(arguments: 0..<3)
    func theMigrationSumsTheRowsAlreadyClassified(seed: Int) throws {
        try withStatsDatabase { db in
            var random = SplitMix(seed: UInt64(seed) &+ 0xC0_5028)
            try StatsCountsRuleTests.loadRandomInbox(&random, subscriptions: 8, on: db) { random in
                if random.next(3) == 0 { try SubscriptionStates.refresh(on: db, now: Self.to) }
            }
            try SubscriptionStates.refresh(on: db, now: Self.to)
            try db.execute("DROP TABLE billing_cohort_sums, billing_cohort_paying")
            try db.execute("DELETE FROM schema_migrations WHERE version IN (28, 29)")
            try migrateTestDatabase(db)
            #expect(try !Self.cohortSums(fromTable: true, on: db).isEmpty)
            #expect(try Self.cohortSums(fromTable: true, on: db) == Self.cohortSums(fromTable: false, on: db))
            #expect(try Self.cohortPaying(fromTable: true, on: db) == Self.cohortPaying(fromTable: false, on: db))
            try StatsMovementRuleTests.loadRandomSubscriptions(&random, count: 10, on: db)
            try SubscriptionStates.refresh(on: db, now: Self.to)
            #expect(try Self.cohortSums(fromTable: true, on: db) == Self.cohortSums(fromTable: false, on: db))
            #expect(try Self.cohortPaying(fromTable: true, on: db) == Self.cohortPaying(fromTable: false, on: db))
        }
    }

    struct Reference {
        struct Cohort {
            var members: Set<String> = []
            /// Retention entries the cohort has (index 0 and each boundary reached).
            var reached = 0
            var paying: [Int: Int64] = [:]
            var sales: [(price: Int64, currency: String, day: Timestamp)] = []
            var refunds: [(price: Int64, currency: String, day: Timestamp)] = []

            func revenue(
                in currency: String, rates: (String, Timestamp) throws -> Double?
            ) throws -> (gross: Double, refunded: Double, unconverted: JSON, tolerance: Double) {
                var unconverted: [String: (Int64, Int64)] = [:]
                var groups = Set<String>()
                func sum(_ amounts: [(price: Int64, currency: String, day: Timestamp)], refund: Bool) throws -> Double {
                    var total = 0.0
                    for a in amounts {
                        if a.currency == currency {
                            total += Double(a.price)
                            continue
                        }
                        guard a.currency != "XXX", let c = try rates(a.currency, a.day), let r = try rates(currency, a.day) else {
                            if refund {
                                unconverted[a.currency, default: (0, 0)].1 += a.price
                            } else {
                                unconverted[a.currency, default: (0, 0)].0 += a.price
                            }
                            continue
                        }
                        groups.insert("\(refund) \(a.currency) \(a.day.civil.year)-\(a.day.civil.month)-\(a.day.civil.day)")
                        total += Double(a.price) * r / c
                    }
                    return total
                }
                let gross = try sum(sales, refund: false)
                let refunded = try sum(refunds, refund: true)
                var object = JSONObject()
                for (code, u) in unconverted { object[code] = ["grossMilli": .int(u.0), "refundedMilli": .int(u.1)] }
                return (gross, refunded, .object(object), 0.5 * Double(groups.count) + 0.001)
            }
        }

        var cohorts: [String: Cohort] = [:]
        var rate: (String, Timestamp) throws -> Double?
    }

    /// Every non-zero row of `billing_cohort_sums` (`fromTable`) or summed from the classified
    /// rows and their subscriptions' first paid rows, one line each.
    static func cohortSums(fromTable: Bool, on db: DatabaseConnection) throws -> [String] {
        let columns = ["members"] + SubscriptionStats.moneyColumns.map(\.column)
        let query: SQLQuery =
            if fromTable {
                "SELECT environment, cohort_month AS cohort, day, money_currency, money_day, \(unsafeRaw: columns.joined(separator: ", ")) FROM billing_cohort_sums"
            } else {
                """
                SELECT k.environment, \(unsafeRaw: SubscriptionStates.cohortMonthOf) AS cohort, DATE(k.intrinsic_at) AS day,
                  \(unsafeRaw: SubscriptionStats.moneyGroup), \(unsafeRaw: SubscriptionStates.cohortRowSums(sign: 1))
                FROM billing_counted_events f
                JOIN billing_counted_events k ON k.environment = f.environment AND k.subscription_id = f.subscription_id
                WHERE f.first_paid = 1
                GROUP BY k.environment, cohort, day, money_currency, money_day
                """
            }
        return try db.query(query).compactMap { row in
            let values = try columns.map { try row.saturatedInt64($0) }
            guard values.contains(where: { $0 != 0 }) else { return nil }
            return try "\(row.string("environment")) \(row.timestamp("cohort").iso8601) \(row.timestamp("day").iso8601) "
                + "\(row.string("money_currency")) \(row.timestamp("money_day").iso8601) " + values.map(String.init).joined(separator: " ")
        }.sorted()
    }

    /// Every non-zero row of `billing_cohort_paying` (`fromTable`), or the paying states of
    /// span_class 11 or less active at each first instant of a month from 2025-01 to 2027-12,
    /// per cohort month (each boundary's states read on their own), one line each.
    static func cohortPaying(fromTable: Bool, on db: DatabaseConnection) throws -> [String] {
        func line(_ row: SQLRow) throws -> String {
            try "\(row.string("environment")) \(row.timestamp("cohort_month").iso8601) \(row.timestamp("boundary").iso8601) \(row.int64("paying"))"
        }
        if fromTable {
            return try db.query("SELECT environment, cohort_month, boundary, paying FROM billing_cohort_paying WHERE paying <> 0").map(line).sorted()
        }
        var lines: [String] = []
        var boundary = SubscriptionStats.Month(Timestamp(iso8601: "2025-01-01T00:00:00Z")!)
        while boundary.start < Timestamp(iso8601: "2028-01-01T00:00:00Z")! {
            for env in ["production", "sandbox"] {
                lines += try db.query(
                    """
                    SELECT s.environment, CAST(DATE_FORMAT(s.cohort_paid_at, '%Y-%m-01') AS DATE) AS cohort_month,
                      DATE(\(boundary.start)) AS boundary, COUNT(*) AS paying
                    \(SubscriptionStates.active(at: boundary.start, environment: env)) AND \(unsafeRaw: SubscriptionStates.paid)
                      AND s.cohort_paid_at IS NOT NULL AND s.span_class <= 11
                    GROUP BY s.environment, cohort_month
                    """
                ).map(line)
            }
            boundary = boundary + 1
        }
        return lines.sorted()
    }

    static func monthText(_ t: Timestamp) -> String {
        let c = t.civil
        return "\(c.year)-\(c.month < 10 ? "0" : "")\(c.month)"
    }

    /// The cohorts the slow and plain way.
    static func reference(from: Timestamp, to: Timestamp, now: Timestamp, on db: DatabaseConnection) throws -> Reference {
        let notCounted = Set(["test", "transfer", "unknown"] + EventKind.allCases.filter(\.isInformational).map(\.rawValue))
        var events: [String: [Event]] = [:]
        for row in try db.query(
            """
            SELECT id, provider, subscription_id, kind, status, intrinsic_at, is_trial, family_shared, price_milli, currency,
              transaction_id, COALESCE(purchased_at, intrinsic_at) AS period_key
            FROM billing_events WHERE environment = 'production'
            """)
        {
            guard let sub = try row.optionalString("subscription_id"), let at = try row.optionalTimestamp("intrinsic_at"),
                ["applied", "unmatched"].contains(try row.string("status")), !notCounted.contains(try row.string("kind"))
            else { continue }
            var kind = try row.string("kind")
            // A Google Play state reports its order's period: the first order a purchase, a renewal's (`..N`) a renewal.
            if try row.string("provider") == "google_play", kind == "subscriber_state" {
                kind = (try row.optionalString("transaction_id") ?? "").contains("..") ? "renewal" : "purchase"
            }
            events[sub, default: []].append(
                Event(
                    id: try row.int64("id"), kind: kind, at: at, isTrial: try row.bool("is_trial"),
                    isShared: try row.bool("family_shared"), price: try row.optionalInt64("price_milli"),
                    currency: try row.optionalString("currency"), periodKey: try row.timestamp("period_key")))
        }
        var reference = Reference(cohorts: [:]) { currency, day in
            if currency == "EUR" { return 1 }
            let row = try db.queryOne(
                """
                SELECT per_eur FROM billing_exchange_rates WHERE currency = \(currency) AND rate_date <= DATE(\(day))
                ORDER BY rate_date DESC LIMIT 1
                """)
            return try row.map { Double(try $0.string("per_eur"))! }
        }
        var cohortOf: [String: SubscriptionStats.Month] = [:]
        for (sub, list) in events {
            let sorted = list.sorted { ($0.at, $0.id) < ($1.at, $1.id) }
            let paid = sorted.first {
                ["purchase", "renewal", "subscriber_state"].contains($0.kind) && !$0.isTrial && !$0.isShared && ($0.price ?? 0) > 0
            }
            guard let paid, paid.at >= from, paid.at < to else { continue }
            let month = SubscriptionStats.Month(paid.at)
            cohortOf[sub] = month
            var cohort = reference.cohorts[monthText(paid.at), default: Reference.Cohort()]
            cohort.members.insert(sub)
            var starts = Set<Timestamp>()
            var refunded = Set<Timestamp>()
            for e in sorted where e.at < to {
                let key = e.periodKey
                if ["purchase", "renewal", "non_renewing_purchase"].contains(e.kind), starts.insert(key).inserted,
                    e.kind == "non_renewing_purchase" || !e.isTrial, !e.isShared, let price = e.price, price > 0
                {
                    cohort.sales.append((price, e.currency ?? "XXX", key))
                }
                if e.kind == "refund", refunded.insert(key).inserted, !e.isShared, let price = e.price, price != 0 {
                    cohort.refunds.append((abs(price), e.currency ?? "XXX", key))
                }
            }
            reference.cohorts[monthText(paid.at)] = cohort
        }
        let asOf = min(to, now)
        var boundary = SubscriptionStats.Month(from) + 1
        while boundary.start <= asOf {
            for row in try db.query(
                """
                SELECT z.subscription_id
                \(SubscriptionStats.derivedActiveSubscriptions(at: boundary.start, environment: "production"))
                  AND \(unsafeRaw: SubscriptionStats.derivedPaidPeriod)
                """)
            {
                let sub = try row.string("subscription_id")
                guard let cohort = cohortOf[sub], cohort < boundary else { continue }
                reference.cohorts[monthText(cohort.start)]!.paying[boundary.index - cohort.index, default: 0] += 1
            }
            boundary = boundary + 1
        }
        // Entries: index 0, and one per month boundary after the cohort's month up to asOf.
        var month = SubscriptionStats.Month(from)
        while month.start < to {
            var k = 1
            while (month + k).start <= asOf { k += 1 }
            reference.cohorts[monthText(month.start), default: Reference.Cohort()].reached = k
            month = month + 1
        }
        return reference
    }
}
