import Foundation
import Testing

@testable import Core

/// stats.subscriptions against a hand-computed fixture of normalized inbox rows from both
/// providers (docs/stats.md has the definitions; the expected numbers are worked out in
/// the comments of `StatsFixture`).
@Suite struct SubscriptionStatsTests {
    static let catalog: [String: Cadence] = [
        "app.plus.monthly": .monthly, "app.pro.yearly": .yearly, "app.plus.weekly": .weekly,
    ]
    static func cadence(_ product: String) -> Cadence? {
        catalog[product] ?? (product.contains("annual") ? .yearly : nil)
    }

    static func t(_ text: String) -> Timestamp { Timestamp(iso8601: text)! }
    static let from = t("2026-03-01T00:00:00Z"), to = t("2026-04-01T00:00:00Z"), now = t("2026-04-10T12:00:00Z")

    func report(
        _ db: DatabaseConnection, from: Timestamp = Self.from, to: Timestamp = Self.to,
        environment: StoreEnvironment = .production, currency: String = "EUR", timeZone: String? = nil
    ) throws -> JSON {
        try SubscriptionStats.compute(
            SubscriptionStats.Query(from: from, to: to, environment: environment, currency: currency, timeZone: timeZone),
            now: Self.now, cadence: Self.cadence, on: db)
    }

    func int(_ json: JSON, _ path: String) -> Int64? {
        var node: JSON? = json
        for key in path.split(separator: ".") { node = node?[String(key)] }
        return node?.int64Value
    }

    func double(_ json: JSON, _ path: String) -> Double? {
        var node: JSON? = json
        for key in path.split(separator: ".") { node = node?[String(key)] }
        return node?.doubleValue
    }

    @Test func fixtureNumbersAreExact() throws {
        try withStatsDatabase { db in
            try StatsFixture.load(db)
            let r = try report(db)
            // Counts over [from, to).
            let c = r["counts"]!["current"]!
            #expect(int(c, "new") == 6)
            #expect(int(c, "trials") == 1)
            #expect(int(c, "converted") == 1)
            #expect(int(c, "renewals") == 3)
            #expect(int(c, "cancellations") == 2)
            #expect(int(c, "lost") == 5)
            #expect(int(c, "refunds") == 2)
            #expect(int(c, "grossMilli") == 100_940)
            #expect(int(c, "refundedMilli") == 9_990)
            #expect(int(c, "revenueMilli") == 90_950)
            // The previous period [from - 31 days, from).
            let p = r["counts"]!["previous"]!
            #expect(int(p, "new") == 3)
            #expect(int(p, "trials") == 1)
            #expect(int(p, "converted") == 0)
            #expect(int(p, "renewals") == 2)
            #expect(int(p, "cancellations") == 1)
            #expect(int(p, "lost") == 0)
            #expect(int(p, "refunds") == 0)
            #expect(int(p, "revenueMilli") == 39_960)
            #expect(r["previousPeriod"]?["from"]?.stringValue == "2026-01-29T00:00:00.000Z")

            // Snapshot at from (events strictly before it).
            let s = r["snapshots"]!["start"]!
            #expect(int(s, "active") == 5)
            #expect(int(s, "trial") == 1)
            #expect(int(s, "paying") == 4)
            #expect(int(s, "cancelling") == 1)
            #expect(int(s, "mrrMilli") == 34_136)
            let startProducts = s["byProduct"]!.arrayValue!
            #expect(startProducts.count == 2)
            #expect(startProducts[0]["productId"]?.stringValue == "app.plus.monthly")
            #expect(int(startProducts[0], "active") == 4)
            #expect(int(startProducts[0], "trial") == 1)
            #expect(int(startProducts[0], "mrrMilli") == 29_970)
            #expect(startProducts[1]["productId"]?.stringValue == "rc_pro_annual")
            #expect(int(startProducts[1], "cancelling") == 1)
            #expect(int(startProducts[1], "mrrMilli") == 4_166)

            // Snapshot at min(to, now) = to.
            let e = r["snapshots"]!["end"]!
            #expect(e["at"]?.stringValue == "2026-04-01T00:00:00.000Z")
            #expect(int(e, "active") == 6)
            #expect(int(e, "trial") == 0)
            #expect(int(e, "paying") == 6)
            #expect(int(e, "cancelling") == 1)
            #expect(int(e, "mrrMilli") == 47_102)
            let endProducts = Dictionary(
                uniqueKeysWithValues: e["byProduct"]!.arrayValue!.map {
                    ($0["productId"]!.stringValue!, $0)
                })
            #expect(endProducts.count == 5)
            #expect(int(endProducts["app.plus.monthly"]!, "active") == 2)
            #expect(int(endProducts["app.plus.monthly"]!, "mrrMilli") == 19_980)
            #expect(int(endProducts["app.pro.yearly"]!, "mrrMilli") == 4_999)
            #expect(int(endProducts["app.plus.weekly"]!, "mrrMilli") == 12_957)
            #expect(endProducts["app.plus.weekly"]?["cadence"]?.stringValue == "weekly")
            #expect(int(endProducts["mystery_sub"]!, "mrrMilli") == 5_000)
            #expect(endProducts["mystery_sub"]?["cadence"]?.stringValue == "monthly")
            #expect(int(endProducts["rc_pro_annual"]!, "mrrMilli") == 4_166)

            // Derived.
            #expect(double(r, "derived.trialConversionPct") == 100.0)
            #expect(double(r, "derived.previousTrialConversionPct") == 0.0)
            // Paying % (SPEC §20): of the 6 paying subscriptions at the end, 4 have known
            // owners (U1, U2, U7, U8; S11 and S13 wait unmatched); U7 and U8 did not open the
            // app in March but count as active: 4 of 10 + 2 users, 33.3 %, never above 100.
            #expect(int(r, "snapshots.end.paying") == 6)
            #expect(int(r, "derived.seenUsers") == 10)
            #expect(int(r, "derived.payingUsers") == 4)
            #expect(int(r, "derived.activeUsers") == 12)
            #expect(double(r, "derived.payingPct") == 33.3)

            // Profile: days from sign-up to start of S2, S4, S5, S6, S8 = 0, 9, 42, 0, 10.
            #expect(int(r, "subscriberProfile.subscriptions") == 5)
            #expect(double(r, "subscriberProfile.medianDaysToSubscribe") == 9.0)

            // Funnel: paywall events of the last 30 days within the period.
            #expect(r["funnel"]?["from"]?.stringValue == "2026-03-11T12:00:00.000Z")
            let placements = r["funnel"]!["placements"]!.arrayValue!
            #expect(placements.count == 2)
            #expect(placements[0]["placement"]?.stringValue == "onboarding")
            #expect(int(placements[0], "views") == 4)
            #expect(int(placements[0], "attempts") == 2)
            #expect(int(placements[0], "purchases") == 1)
            #expect(double(placements[0], "conversionPct") == 25.0)
            #expect(placements[1]["placement"]?.stringValue == "quota")
            #expect(int(placements[1], "views") == 3)
            #expect(int(placements[1], "purchases") == 1)
            #expect(double(placements[1], "conversionPct") == 33.3)

            // Daily series, UTC: every day of March.
            let series = r["series"]!.arrayValue!
            #expect(series.count == 31)
            func day(_ d: String) -> (Int64?, Int64?) {
                let entry = series.first { $0["date"]?.stringValue == d }
                return (entry?["new"]?.int64Value, entry?["lost"]?.int64Value)
            }
            #expect(series.reduce(0) { $0 + ($1["new"]?.int64Value ?? 0) } == 6)
            #expect(series.reduce(0) { $0 + ($1["lost"]?.int64Value ?? 0) } == 5)
            #expect(day("2026-03-01") == (1, 0))
            #expect(day("2026-03-03") == (0, 1))
            #expect(day("2026-03-20") == (1, 1))
            #expect(day("2026-03-22") == (1, 0))
            #expect(day("2026-03-31") == (0, 0))

            // Recent: 20, newest first, production only.
            let recent = r["recent"]!.arrayValue!
            #expect(recent.count == 20)
            #expect(recent[0]["at"]?.stringValue == "2026-04-01T00:00:00.000Z")
            #expect(!recent.contains { $0["subscriptionId"]?.stringValue == "S9" })
        }
    }

    /// The RPC daemon keeps prepared statements per connection: the same report twice on
    /// one connection must re-execute them correctly (MariaDB derived-table re-execution).
    @Test func sameReportTwiceOnOneConnection() throws {
        try withStatsDatabase { db in
            try StatsFixture.load(db)
            for zone in [nil, "+13:00", nil, "America/New_York", "+02:00"] {
                let r = try report(db, timeZone: zone)
                #expect(int(r, "counts.current.new") == 6)
                #expect(int(r, "counts.current.converted") == 1)
                #expect(int(r, "snapshots.end.mrrMilli") == 47_102)
                #expect(int(r, "subscriberProfile.subscriptions") == 5)
            }
        }
    }

    @Test func reportingCurrencyOnlyCountsItsAmounts() throws {
        try withStatsDatabase { db in
            try StatsFixture.load(db)
            let r = try report(db, currency: "USD")
            #expect(int(r, "counts.current.grossMilli") == 10_990)
            #expect(int(r, "counts.current.refundedMilli") == 10_990)
            #expect(int(r, "counts.current.revenueMilli") == 0)
            #expect(int(r, "snapshots.end.mrrMilli") == 0)
            #expect(int(r, "snapshots.end.active") == 6)
        }
    }

    @Test func eventAtToBelongsToTheNextPeriod() throws {
        try withStatsDatabase { db in
            try StatsFixture.load(db)
            let r = try report(db, from: Self.to, to: Self.t("2026-05-01T00:00:00Z"))
            #expect(int(r, "counts.current.new") == 1)  // S10, exactly at the new period's from
            #expect(int(r, "counts.current.grossMilli") == 9_990)
            // The snapshot at this period's start is the previous report's end.
            #expect(int(r, "snapshots.start.active") == 6)
            #expect(int(r, "snapshots.start.mrrMilli") == 47_102)
            // End = now (2026-04-10T12:00Z): S1 (to 04-04) and S13 (to 04-05) lapsed; S10 (to 05-01) came.
            #expect(r["snapshots"]?["end"]?["at"]?.stringValue == "2026-04-10T12:00:00.000Z")
            #expect(int(r, "snapshots.end.active") == 5)
        }
    }

    @Test func emptyPeriodIsAllZeros() throws {
        try withStatsDatabase { db in
            try StatsFixture.load(db)
            let r = try report(db, from: Self.t("2020-01-01T00:00:00Z"), to: Self.t("2020-02-01T00:00:00Z"))
            for period in ["current", "previous"] {
                for key in ["new", "trials", "converted", "renewals", "cancellations", "lost", "refunds", "revenueMilli"] {
                    #expect(int(r, "counts.\(period).\(key)") == 0, "\(period).\(key)")
                }
            }
            for snapshot in ["start", "end"] {
                for key in ["active", "trial", "paying", "cancelling", "mrrMilli"] {
                    #expect(int(r, "snapshots.\(snapshot).\(key)") == 0)
                }
                #expect(r["snapshots"]?[snapshot]?["byProduct"]?.arrayValue?.isEmpty == true)
            }
            #expect(double(r, "derived.trialConversionPct") == 0)
            #expect(double(r, "derived.payingPct") == 0)
            #expect(int(r, "derived.activeUsers") == 0)
            #expect(int(r, "subscriberProfile.subscriptions") == 0)
            #expect(r["subscriberProfile"]?["medianDaysToSubscribe"]?.isNull == true)
            #expect(r["funnel"]?["placements"]?.arrayValue?.isEmpty == true)
            #expect(r["series"]?.arrayValue?.count == 31)
            #expect(r["series"]?.arrayValue?.allSatisfy { $0["new"] == 0 && $0["lost"] == 0 } == true)
        }
    }

    /// Subscribers who never open the app are active users too: with nobody seen, every
    /// active user is a paying one, 100 % and not 1300 % (SPEC §20).
    @Test func payingShareNeverExceedsAHundredPercent() throws {
        try withStatsDatabase { db in
            try StatsFixture.load(db)
            try db.execute("DELETE FROM billing_user_days")
            let r = try report(db)
            #expect(int(r, "derived.seenUsers") == 0)
            #expect(int(r, "derived.payingUsers") == 4)
            #expect(int(r, "derived.activeUsers") == 4)
            #expect(double(r, "derived.payingPct") == 100.0)
            // Seen paying users are not counted twice.
            try db.execute("INSERT INTO billing_user_days (day, user_id) VALUES ('2026-03-04', 'U1'), ('2026-03-04', 'U7')")
            let seen = try report(db)
            #expect(int(seen, "derived.seenUsers") == 2)
            #expect(int(seen, "derived.activeUsers") == 4)
            #expect(double(seen, "derived.payingPct") == 100.0)
        }
    }

    /// The subscriber profile's median from its counts per number of days equals MariaDB's
    /// `MEDIAN()` over the same rows: odd and even counts, ties, one row, values far apart.
    @Test(arguments: 0..<8)
    func profileMedianIsMariaDBs(seed: Int) throws {
        try withStatsDatabase { db in
            var random = SplitMix(seed: UInt64(seed) &+ 0x9E_D1A7)
            let count = seed == 0 ? 1 : 2 + random.next(40)
            for n in 0..<count {
                let days = seed % 2 == 0 ? random.next(6) : random.next(3_000)
                let kind = random.next(5) == 0 ? "renewal" : "purchase"
                try db.execute(
                    """
                    INSERT INTO billing_counted_events (environment, intrinsic_at, event_id, subscription_id, kind, is_trial,
                      family_shared, period_at, first_ever, period_first, converted, first_paid, signup_days)
                    VALUES ('production', \(Self.from.adding(milliseconds: Int64(n) * 60_000)), \(Int64(n + 1)), \("P\(n)"), \(kind),
                      0, 0, \(Self.from), \(random.next(4) != 0), 1, 0, 0, \(random.next(6) == 0 ? nil : Int64(days)))
                    """)
            }
            let q = SubscriptionStats.Query(from: Self.from, to: Self.to, environment: .production, currency: "EUR")
            let profile = try SubscriptionStats.subscriberProfile(q, on: db)
            let reference = try db.queryOne(
                """
                SELECT COUNT(*) OVER () AS n, MEDIAN(k.signup_days) OVER () AS median_days FROM billing_counted_events k
                WHERE k.first_ever = 1 AND k.kind = 'purchase' AND k.signup_days IS NOT NULL LIMIT 1
                """)
            #expect(profile["subscriptions"]?.int64Value == (try reference?.int64("n") ?? 0), "seed \(seed)")
            let median = try reference?.optionalDouble("median_days").map { ($0 * 10).rounded(.toNearestOrAwayFromZero) / 10 }
            #expect(profile["medianDaysToSubscribe"]?.doubleValue == median, "seed \(seed)")
        }
    }

    @Test func emptyDatabaseHasNoDivisionErrors() throws {
        try withStatsDatabase { db in
            let r = try report(db)
            #expect(int(r, "counts.current.new") == 0)
            #expect(double(r, "derived.payingPct") == 0)
            #expect(r["recent"]?.arrayValue?.isEmpty == true)
        }
    }

    @Test func sandboxAndProductionNeverMix() throws {
        try withStatsDatabase { db in
            try StatsFixture.load(db)
            let r = try report(db, environment: .sandbox)
            #expect(int(r, "counts.current.new") == 1)
            #expect(int(r, "counts.current.grossMilli") == 9_990)
            #expect(int(r, "counts.previous.new") == 0)
            #expect(int(r, "snapshots.end.active") == 1)
            #expect(int(r, "snapshots.end.mrrMilli") == 9_990)
            #expect(int(r, "snapshots.start.active") == 0)
            let recent = r["recent"]!.arrayValue!
            #expect(recent.count == 1)
            #expect(recent[0]["subscriptionId"]?.stringValue == "S9")
            let placements = r["funnel"]!["placements"]!.arrayValue!
            #expect(placements.count == 1)
            #expect(int(placements[0], "views") == 1)
        }
    }

    @Test func timeZoneShiftsTheDailySeries() throws {
        try withStatsDatabase { db in
            try StatsFixture.load(db)
            // New York is UTC-5 until 2026-03-08, then UTC-4: S2 (03-01T00:00Z) is born on 02-28 there.
            let ny = try report(db, timeZone: "America/New_York")
            let series = ny["series"]!.arrayValue!
            #expect(series.count == 32)
            #expect(series.first?["date"]?.stringValue == "2026-02-28")
            #expect(series.first?["new"]?.int64Value == 1)
            #expect(series.last?["date"]?.stringValue == "2026-03-31")
            #expect(series.reduce(0) { $0 + ($1["new"]?.int64Value ?? 0) } == 6)
            #expect(ny["timeZone"]?.stringValue == "America/New_York")
            // Counts do not depend on the zone.
            #expect(int(ny, "counts.current.new") == 6)
            // A fixed offset works without time zone tables.
            let plus = try report(db, timeZone: "+13:00")
            let plusSeries = plus["series"]!.arrayValue!
            #expect(plusSeries.first?["date"]?.stringValue == "2026-03-01")
            #expect(plusSeries.last?["date"]?.stringValue == "2026-04-01")
            #expect(throws: SubscriptionStats.QueryError.unknownTimeZone("Mars/Olympus")) {
                try report(db, timeZone: "Mars/Olympus")
            }
        }
    }

    @Test func invalidPeriodsAreRefused() throws {
        try withStatsDatabase { db in
            #expect(throws: SubscriptionStats.QueryError.emptyPeriod) { try report(db, from: Self.to, to: Self.from) }
            #expect(throws: SubscriptionStats.QueryError.periodTooLong) {
                try report(db, from: Self.t("2024-01-01T00:00:00Z"), to: Self.to)
            }
        }
    }

    @Test func pctRoundsToOneDecimalAndIsZeroForZeroDenominators() {
        #expect(SubscriptionStats.pct(1, 3) == 33.3)
        #expect(SubscriptionStats.pct(2, 3) == 66.7)
        #expect(SubscriptionStats.pct(1, 8) == 12.5)
        #expect(SubscriptionStats.pct(5, 0) == 0)
        #expect(SubscriptionStats.pct(0, 0) == 0)
    }

    @Test func paywallPurgeRemovesOnlyExpiredRows() throws {
        try withStatsDatabase { db in
            try StatsFixture.load(db)
            // Fixture: 12 paywall rows, one received 2026-03-05 (older than 30 days at now).
            #expect(try PaywallEvents.purge(now: Self.now, on: db) == 1)
            #expect(try PaywallEvents.purge(now: Self.now, on: db) == 0)
            #expect(try db.queryOne("SELECT COUNT(*) AS n FROM billing_paywall_events")?.int64("n") == 11)
        }
    }

    @Test func userActivityRecordsOneRowPerDay() throws {
        try withStatsDatabase { db in
            try db.execute(
                """
                INSERT INTO billing_users (id, created_at, first_seen_at, last_seen_at, source)
                VALUES ('ua', '2026-03-01 00:00:00', '2026-03-01 00:00:00', '2026-03-01 00:00:00', 'token')
                """)
            try UserActivity.record("ua", now: Self.t("2026-03-02T10:00:00Z"), on: db)
            try UserActivity.record("ua", now: Self.t("2026-03-02T11:00:00Z"), on: db)
            try UserActivity.record("ua", now: Self.t("2026-03-03T09:00:00Z"), on: db)
            #expect(try db.queryOne("SELECT COUNT(*) AS n FROM billing_user_days WHERE user_id = 'ua'")?.int64("n") == 2)
            // Coarse: last_seen_at moves once per day (the first sighting of that day).
            #expect(
                try db.queryOne("SELECT last_seen_at FROM billing_users WHERE id = 'ua'")?.timestamp("last_seen_at")
                    == Self.t("2026-03-03T09:00:00Z"))
        }
    }
}

/// A migrated test database.
func withStatsDatabase(_ body: (DatabaseConnection) throws -> Void) throws {
    try withMigratedDatabase(body)
}

/// The hand-computed fixture. Period [2026-03-01, 2026-04-01), previous [2026-01-29, 2026-03-01),
/// now 2026-04-10T12:00Z. Expected numbers (EUR):
/// - S1  RC trial 02-25 (to 03-04) → paid renewal 03-04 9.99 (to 04-04), twin Apple DID_RENEW:
///       new+trial previous; converted, renewal (once), 9.99 current; start: trial; end: paying.
/// - S2  Apple purchase exactly at from, 59.99 yearly, twin client transaction: new current
///       (boundary), not in the start snapshot; end: MRR 59990/12 → 4999.
/// - S3  RC 02-10 9.99 (to 03-10), cancellation 03-05, expiration 03-10: new previous; cancellation+lost current.
/// - S4  RC weekly trial 03-10 (to 03-13), cancellation 03-11, expiration 03-13: new+trial, cancellation, lost.
/// - S5  Apple 03-15 10.99 USD, refund 03-20: new, lost, refund current (USD: no EUR amount).
/// - S6  RC 03-02T10:00 9.99, customer-support refund −9.99 on 03-03: new, lost, refund, refunded 9.99.
/// - S7  RC rc_pro_annual 2025-12-01 49.99 (to 2026-12-01), cancellation 02-15: cancellation previous;
///       active + cancelling at both snapshots, MRR 49990/12 → 4166.
/// - S8  RC mystery_sub 03-20 5.00, 30-day period → monthly by length: new; end MRR 5000.
/// - S9  sandbox RC 03-05 9.99: only in the sandbox report.
/// - S10 Apple purchase exactly at to: in no count of this period, not in the end snapshot.
/// - S11 RC unmatched: 01-30, 02-28, 03-28 at 9.99 (monthly): new+renewal previous, renewal current.
/// - S12 Apple: 2026-01-01, renewal 02-01 (to 03-01), billing issue 02-28T23:00 with grace to 03-17,
///       expiration 03-17: renewal previous; active (grace) at from; lost current.
/// - S13 Apple weekly unmatched: 03-22 2.99 (to 03-29), renewal 03-29 (to 04-05): new, renewal;
///       end MRR 2990 × 52/12 → 12957.
/// Plus an ignored test event inside the period, 10 users seen in March, paywall events.
enum StatsFixture {
    struct Row {
        var provider = "revenuecat"
        var kind: String
        var sub: String?
        var product: String? = "app.plus.monthly"
        var trial = false
        var price: Int64? = nil
        var currency: String? = "EUR"
        var env = "production"
        var purchased: String? = nil
        var expires: String? = nil
        var grace: String? = nil
        var at: String
        var user: String? = nil
        var status = "applied"
        var willRenew: Bool? = nil
        var reason: String? = nil
        var familyShared = false
        /// A Google Play state's order (`transaction_id`): the first order, or a renewal's `..N`.
        var transactionId: String? = nil
        /// A Google Play replacement: the subscription this one replaces.
        var linked: String? = nil
    }

    /// Inserts one normalized inbox row, as ingestion would have stored it.
    static func insert(_ r: Row, id: String, on db: DatabaseConnection) throws {
        let ts = { (s: String?) in s.flatMap { Timestamp(iso8601: $0) } }
        let price = r.price
        try db.execute(
            """
            INSERT INTO billing_events (provider, provider_event_id, user_id, event_type, kind, subscription_id, product_id,
              tier, period_type, is_trial, price_milli, currency, environment, purchased_at, expires_at, grace_expires_at,
              intrinsic_at, received_at, status, will_renew, reason, family_shared, transaction_id, linked_subscription_id, payload)
            VALUES (\(r.provider), \(id), \(r.status == "applied" ? r.user : nil), \(r.kind.uppercased()), \(r.kind),
              \(r.sub), \(r.product), 'plus', \(r.trial ? "trial" : "normal"), \(r.trial), \(price),
              \(price == nil ? nil : r.currency), \(r.env), \(ts(r.purchased)), \(ts(r.expires)), \(ts(r.grace)),
              \(ts(r.at)), \(ts(r.at)!), \(r.status), \(r.willRenew), \(r.reason), \(r.familyShared), \(r.transactionId), \(r.linked), '{}')
            """)
    }

    static func load(_ db: DatabaseConnection) throws {
        let users: [(String, String)] = [
            ("U1", "2026-02-20T00:00:00Z"), ("U2", "2026-03-01T00:00:00Z"), ("U3", "2026-01-01T00:00:00Z"),
            ("U4", "2026-03-01T00:00:00Z"), ("U5", "2026-02-01T00:00:00Z"), ("U6", "2026-03-02T00:00:00Z"),
            ("U7", "2025-06-01T00:00:00Z"), ("U8", "2026-03-10T00:00:00Z"), ("U9", "2026-01-01T00:00:00Z"),
            ("U12", "2025-01-01T00:00:00Z"),
        ]
        for (id, created) in users {
            try db.execute(
                """
                INSERT INTO billing_users (id, created_at, source) VALUES (\(id), \(Timestamp(iso8601: created)!), 'import')
                """)
        }
        var n = 0
        func add(_ r: Row) throws {
            n += 1
            try insert(r, id: "ev-\(n)", on: db)
        }
        let apple = "apple_notification"
        // S1
        try add(
            Row(
                kind: "purchase", sub: "S1", trial: true, price: 0, purchased: "2026-02-25T00:00:00Z",
                expires: "2026-03-04T00:00:00Z", at: "2026-02-25T00:00:00Z", user: "U1"))
        try add(
            Row(
                kind: "renewal", sub: "S1", price: 9990, purchased: "2026-03-04T00:00:00Z",
                expires: "2026-04-04T00:00:00Z", at: "2026-03-04T00:00:00Z", user: "U1"))
        try add(
            Row(
                provider: apple, kind: "renewal", sub: "S1", price: 9990, purchased: "2026-03-04T00:00:00Z",
                expires: "2026-04-04T00:00:00Z", at: "2026-03-04T00:05:00Z", user: "U1", willRenew: true))
        // S2
        try add(
            Row(
                provider: apple, kind: "purchase", sub: "S2", product: "app.pro.yearly", price: 59990,
                purchased: "2026-03-01T00:00:00Z", expires: "2027-03-01T00:00:00Z", at: "2026-03-01T00:00:00Z", user: "U2"))
        try add(
            Row(
                provider: "apple_transaction", kind: "purchase", sub: "S2", product: "app.pro.yearly", price: 59990,
                purchased: "2026-03-01T00:00:00Z", expires: "2027-03-01T00:00:00Z", at: "2026-03-01T00:00:02Z", user: "U2"))
        // S3
        try add(
            Row(
                kind: "purchase", sub: "S3", price: 9990, purchased: "2026-02-10T00:00:00Z",
                expires: "2026-03-10T00:00:00Z", at: "2026-02-10T00:00:00Z", user: "U3"))
        try add(
            Row(
                kind: "cancellation", sub: "S3", price: 9990, purchased: "2026-02-10T00:00:00Z",
                expires: "2026-03-10T00:00:00Z", at: "2026-03-05T00:00:00Z", user: "U3"))
        try add(Row(kind: "expiration", sub: "S3", expires: "2026-03-10T00:00:00Z", at: "2026-03-10T00:00:00Z", user: "U3"))
        // S4
        try add(
            Row(
                kind: "purchase", sub: "S4", product: "app.plus.weekly", trial: true, price: 0,
                purchased: "2026-03-10T00:00:00Z", expires: "2026-03-13T00:00:00Z", at: "2026-03-10T00:00:00Z", user: "U4"))
        try add(
            Row(
                kind: "cancellation", sub: "S4", product: "app.plus.weekly", trial: true,
                expires: "2026-03-13T00:00:00Z", at: "2026-03-11T00:00:00Z", user: "U4"))
        try add(
            Row(
                kind: "expiration", sub: "S4", product: "app.plus.weekly", trial: true,
                expires: "2026-03-13T00:00:00Z", at: "2026-03-13T00:00:00Z", user: "U4"))
        // S5
        try add(
            Row(
                provider: apple, kind: "purchase", sub: "S5", price: 10990, currency: "USD",
                purchased: "2026-03-15T00:00:00Z", expires: "2026-04-15T00:00:00Z", at: "2026-03-15T00:00:00Z", user: "U5"))
        try add(
            Row(
                provider: apple, kind: "refund", sub: "S5", price: 10990, currency: "USD",
                purchased: "2026-03-15T00:00:00Z", expires: "2026-03-20T00:00:00Z", at: "2026-03-20T00:00:00Z", user: "U5"))
        // S6
        try add(
            Row(
                kind: "purchase", sub: "S6", price: 9990, purchased: "2026-03-02T10:00:00Z",
                expires: "2026-04-02T10:00:00Z", at: "2026-03-02T10:00:00Z", user: "U6"))
        try add(
            Row(
                kind: "refund", sub: "S6", price: -9990, purchased: "2026-03-02T10:00:00Z",
                expires: "2026-04-02T10:00:00Z", at: "2026-03-03T00:00:00Z", user: "U6"))
        // S7
        try add(
            Row(
                kind: "purchase", sub: "S7", product: "rc_pro_annual", price: 49990, purchased: "2025-12-01T00:00:00Z",
                expires: "2026-12-01T00:00:00Z", at: "2025-12-01T00:00:00Z", user: "U7"))
        try add(
            Row(
                kind: "cancellation", sub: "S7", product: "rc_pro_annual", expires: "2026-12-01T00:00:00Z",
                at: "2026-02-15T00:00:00Z", user: "U7"))
        // S8
        try add(
            Row(
                kind: "purchase", sub: "S8", product: "mystery_sub", price: 5000, purchased: "2026-03-20T00:00:00Z",
                expires: "2026-04-19T00:00:00Z", at: "2026-03-20T00:00:00Z", user: "U8"))
        // S9 (sandbox)
        try add(
            Row(
                kind: "purchase", sub: "S9", price: 9990, env: "sandbox", purchased: "2026-03-05T00:00:00Z",
                expires: "2026-04-05T00:00:00Z", at: "2026-03-05T00:00:00Z", user: "U9"))
        // S10 (exactly at to)
        try add(
            Row(
                provider: apple, kind: "purchase", sub: "S10", price: 9990, purchased: "2026-04-01T00:00:00Z",
                expires: "2026-05-01T00:00:00Z", at: "2026-04-01T00:00:00Z", user: "U9"))
        // S11 (unmatched)
        for (at, end, kind) in [
            ("2026-01-30", "2026-02-28", "purchase"), ("2026-02-28", "2026-03-28", "renewal"),
            ("2026-03-28", "2026-04-28", "renewal"),
        ] {
            try add(
                Row(
                    kind: kind, sub: "S11", price: 9990, purchased: "\(at)T00:00:00Z", expires: "\(end)T00:00:00Z",
                    at: "\(at)T00:00:00Z", status: "unmatched"))
        }
        // S12
        try add(
            Row(
                provider: apple, kind: "purchase", sub: "S12", price: 9990, purchased: "2026-01-01T00:00:00Z",
                expires: "2026-02-01T00:00:00Z", at: "2026-01-01T00:00:00Z", user: "U12"))
        try add(
            Row(
                provider: apple, kind: "renewal", sub: "S12", price: 9990, purchased: "2026-02-01T00:00:00Z",
                expires: "2026-03-01T00:00:00Z", at: "2026-02-01T00:00:00Z", user: "U12"))
        try add(
            Row(
                provider: apple, kind: "billing_issue", sub: "S12", price: 9990, purchased: "2026-02-01T00:00:00Z",
                expires: "2026-03-01T00:00:00Z", grace: "2026-03-17T00:00:00Z", at: "2026-02-28T23:00:00Z", user: "U12"))
        try add(
            Row(
                provider: apple, kind: "expiration", sub: "S12", expires: "2026-03-17T00:00:00Z",
                at: "2026-03-17T00:00:00Z", user: "U12"))
        // S13 (weekly, unmatched)
        try add(
            Row(
                provider: apple, kind: "purchase", sub: "S13", product: "app.plus.weekly", price: 2990,
                purchased: "2026-03-22T00:00:00Z", expires: "2026-03-29T00:00:00Z", at: "2026-03-22T00:00:00Z", status: "unmatched"))
        try add(
            Row(
                provider: apple, kind: "renewal", sub: "S13", product: "app.plus.weekly", price: 2990,
                purchased: "2026-03-29T00:00:00Z", expires: "2026-04-05T00:00:00Z", at: "2026-03-29T00:00:00Z", status: "unmatched"))
        // An ignored test event inside the period changes nothing.
        try add(
            Row(
                kind: "test", sub: "S99", price: 9990, purchased: "2026-03-06T00:00:00Z",
                expires: "2026-04-06T00:00:00Z", at: "2026-03-06T00:00:00Z", status: "ignored"))

        // Users seen (billing_user_days): 10 distinct in March; February and April days do not count.
        var days: [(String, String)] = [
            ("2026-03-03", "U1"), ("2026-03-01", "U2"), ("2026-02-27", "U3"),
            ("2026-03-31", "U4"), ("2026-03-15", "U4"), ("2026-04-01", "U9"),
        ]
        for i in 20..<27 { days.append(("2026-03-10", "U\(i)")) }
        for (day, user) in days {
            try db.execute("INSERT INTO billing_user_days (day, user_id) VALUES (\(day), \(user))")
        }

        // Paywall events (funnel window 2026-03-11T12:00Z..2026-04-01).
        var p = 0
        func paywall(
            _ type: String, _ placement: String, _ result: String? = nil, at: String = "2026-03-20T00:00:00Z",
            env: String = "production"
        ) throws {
            p += 1
            try db.execute(
                """
                INSERT INTO billing_paywall_events (user_id, event_id, type, placement, result, environment, received_at)
                VALUES ('U1', \("pw-\(p)"), \(type), \(placement), \(result), \(env), \(Timestamp(iso8601: at)!))
                """)
        }
        for _ in 0..<4 { try paywall("view", "onboarding") }
        try paywall("purchase", "onboarding", "done")
        try paywall("purchase", "onboarding", "cancelled")
        for _ in 0..<3 { try paywall("view", "quota") }
        try paywall("purchase", "quota", "done")
        try paywall("view", "onboarding", env: "sandbox")
        try paywall("view", "onboarding", at: "2026-03-05T00:00:00Z")  // older than 30 days at now
    }
}
