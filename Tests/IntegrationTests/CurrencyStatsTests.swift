import Foundation
import Testing

@testable import Core

/// Every currency counts (SPEC §20, docs/stats.md "Currencies"): purchases in EUR, USD, JPY
/// and GBP over two months and the rates of a few ECB days give revenue and MRR exactly as
/// computed by hand. Period [2026-03-01, 2026-04-01), previous [2026-01-29, 2026-03-01).
///
/// Rates (units per euro): USD 02-27 1.08, 03-02 1.09, 03-16 1.10; JPY 02-27 160, 03-02
/// 161.92; GBP 03-02 0.85773 (none before: February's GBP is unconverted).
/// - A  USD 9.99 monthly bought Sunday 03-01 12:00 → Friday's 1.08: 9990 ÷ 1.08 = 9250.
/// - B  JPY 1200 monthly 03-02: 1,200,000 ÷ 161.92 = 7411.07 → 7411.
/// - C  GBP 7.99 monthly 02-20 (no rate: unconverted GBP 7990, previous), renewed 03-20 at
///      03-02's 0.85773: 9315.22 → 9315.
/// - D  USD 19.99 monthly 03-16 at 1.10: 18172.73 → 18173; refunded 03-18, converted at its
///      purchase day: 18173.
/// - E  EUR 4.99 monthly 03-05: 4990.
/// - F  USD 9.99 monthly 02-10, before the first USD rate: unconverted USD 9990 (previous),
///      active at the start only.
/// - G  USD 59.99 yearly 02-28 at 02-27's 1.08: 59990 ÷ 1.08 = 55546.30 → 55546;
///      MRR 55546 ÷ 12 = 4628.83 → 4629.
/// Current: gross 9250 + 7411 + 9315 + 18173 + 4990 = 49139, refunded 18173, revenue 30966.
/// Previous: gross 55546, unconverted GBP 7990 and USD 9990.
/// Start snapshot: MRR 4629 (G); unconverted GBP 1 subscription 7990, USD 1 subscription 9990.
/// End snapshot (04-01): A, B, C, E monthly 9250 + 7411 + 9315 + 4990 = 30966, G 4629: 35595;
/// H (a cancellation with an expiry, no period start, no price) active and paying, no MRR.
/// In USD: B 1,200,000 × 1.09 ÷ 161.92 = 8078.06 → 8078; C 7990 × 1.10 ÷ 0.85773 = 10246.74
/// → 10247; E 4990 × 1.09 = 5439.1 → 5439; A 9990 and D 19990 as they are: gross 53744.
@Suite struct CurrencyStatsTests {
    static func t(_ text: String) -> Timestamp { Timestamp(iso8601: text)! }
    static let from = t("2026-03-01T00:00:00Z"), to = t("2026-04-01T00:00:00Z"), now = t("2026-04-10T00:00:00Z")

    static let ecb: [(String, String, String)] = [
        ("2026-02-27", "USD", "1.0800"), ("2026-03-02", "USD", "1.0900"), ("2026-03-16", "USD", "1.1000"),
        ("2026-02-27", "JPY", "160.00"), ("2026-03-02", "JPY", "161.92"), ("2026-03-02", "GBP", "0.85773"),
    ]

    static func entries(_ rows: [(String, String, String)]) -> [ExchangeRates.Entry] {
        rows.map { ExchangeRates.Entry(currency: $0.1, day: RateDay(iso8601: $0.0)!, rate: ExchangeRate(decimal: $0.2)!) }
    }

    /// Adds one event of subscription `sub` (user `U-sub`) numbered by `n`.
    static func add(
        _ db: DatabaseConnection, _ n: inout Int, _ prefix: String, _ kind: String, _ sub: String, _ price: Int64, _ currency: String,
        _ purchased: String, _ expires: String, at: String? = nil, product: String = "app.plus.monthly"
    ) throws {
        n += 1
        var row = StatsFixture.Row(kind: kind, sub: sub, at: at ?? purchased)
        (row.product, row.price, row.currency, row.purchased, row.expires, row.user) = (product, price, currency, purchased, expires, "U-\(sub)")
        try StatsFixture.insert(row, id: "\(prefix)-\(n)", on: db)
    }

    static func load(_ db: DatabaseConnection) throws {
        var n = 0
        func add(
            _ kind: String, _ sub: String, _ price: Int64, _ currency: String, _ purchased: String, _ expires: String,
            at: String? = nil, product: String = "app.plus.monthly"
        ) throws {
            try Self.add(db, &n, "fx", kind, sub, price, currency, purchased, expires, at: at, product: product)
        }
        try add("purchase", "A", 9_990, "USD", "2026-03-01T12:00:00Z", "2026-04-01T12:00:00Z")
        try add("purchase", "B", 1_200_000, "JPY", "2026-03-02T08:00:00Z", "2026-04-02T08:00:00Z")
        try add("purchase", "C", 7_990, "GBP", "2026-02-20T00:00:00Z", "2026-03-20T00:00:00Z")
        try add("renewal", "C", 7_990, "GBP", "2026-03-20T00:00:00Z", "2026-04-20T00:00:00Z")
        try add("purchase", "D", 19_990, "USD", "2026-03-16T09:00:00Z", "2026-04-16T09:00:00Z")
        try add("refund", "D", -19_990, "USD", "2026-03-16T09:00:00Z", "2026-03-18T00:00:00Z", at: "2026-03-18T00:00:00Z")
        try add("purchase", "E", 4_990, "EUR", "2026-03-05T00:00:00Z", "2026-04-05T00:00:00Z")
        try add("purchase", "F", 9_990, "USD", "2026-02-10T00:00:00Z", "2026-03-10T00:00:00Z")
        try add("purchase", "G", 59_990, "USD", "2026-02-28T00:00:00Z", "2027-02-28T00:00:00Z", product: "app.pro.yearly")
        // H: known only by a cancellation that states an expiry (its period start predates
        // the inbox): active, paying, no price, so no MRR and no row to convert.
        var h = StatsFixture.Row(kind: "cancellation", sub: "H", at: "2026-03-10T00:00:00Z")
        h.expires = "2026-04-15T00:00:00Z"
        h.user = "U-H"
        try StatsFixture.insert(h, id: "fx-h", on: db)
    }

    /// The MRR movement fixture (same rates, same period):
    /// - A  USD 9.99 from 03-01: new, 9250.
    /// - C  GBP 7.99 02-20 (no rate at the start) renewed 03-20 (9315): its MRR appears with
    ///      a rate: fx.
    /// - F  USD 9.99 02-10 to 03-10 (no rate): in neither MRR, no movement.
    /// - I  EUR 9.99 02-15 to 03-15, not renewed: churned −9990.
    /// - J  EUR paid in January (to 02-01), bought again 03-10: reactivation 9990.
    /// - K  EUR 4.99 02-20, renewed 03-20 as app.pro.monthly at 7.99: expansion 3000.
    /// - L  USD 9.99 02-27 (1.08: 9250), renewed 03-27 at 03-16's 1.10 (9081.82): at the
    ///      start's rate the same 9250, no expansion; −168.18 is fx.
    /// MRR start: I 9990 + K 4990 + L 9250 = 24230. End: A 9250 + C 9315 + J 9990 + L
    /// round(9081.82) 9082 = 37637 monthly, K 7990: 45627. Difference 21397 = new 9250 +
    /// reactivation 9990 + expansion 3000 − churned 9990 + fx 9147 (9315 − 168.18, and the
    /// 0.18 L's MRR was rounded by). Churn: 1 of the 3 subscriptions with MRR at the start.
    static func loadMovements(_ db: DatabaseConnection) throws {
        var n = 0
        func add(
            _ kind: String, _ sub: String, _ price: Int64, _ currency: String, _ purchased: String, _ expires: String,
            product: String = "app.plus.monthly"
        ) throws {
            try Self.add(db, &n, "mv", kind, sub, price, currency, purchased, expires, product: product)
        }
        try add("purchase", "A", 9_990, "USD", "2026-03-01T12:00:00Z", "2026-04-01T12:00:00Z")
        try add("purchase", "C", 7_990, "GBP", "2026-02-20T00:00:00Z", "2026-03-20T00:00:00Z")
        try add("renewal", "C", 7_990, "GBP", "2026-03-20T00:00:00Z", "2026-04-20T00:00:00Z")
        try add("purchase", "F", 9_990, "USD", "2026-02-10T00:00:00Z", "2026-03-10T00:00:00Z")
        try add("purchase", "I", 9_990, "EUR", "2026-02-15T00:00:00Z", "2026-03-15T00:00:00Z")
        try add("purchase", "J", 9_990, "EUR", "2026-01-01T00:00:00Z", "2026-02-01T00:00:00Z")
        try add("purchase", "J", 9_990, "EUR", "2026-03-10T00:00:00Z", "2026-04-10T00:00:00Z")
        try add("purchase", "K", 4_990, "EUR", "2026-02-20T00:00:00Z", "2026-03-20T00:00:00Z")
        try add("renewal", "K", 7_990, "EUR", "2026-03-20T00:00:00Z", "2026-04-20T00:00:00Z", product: "app.pro.monthly")
        try add("purchase", "L", 9_990, "USD", "2026-02-27T00:00:00Z", "2026-03-27T00:00:00Z")
        try add("renewal", "L", 9_990, "USD", "2026-03-27T00:00:00Z", "2026-04-27T00:00:00Z")
    }

    @Test func mrrMovesByKindAndTheKindsSumToTheChange() throws {
        try withStatsDatabase { db in
            try Self.loadMovements(db)
            _ = try ExchangeRates.importRates(Self.entries(Self.ecb), source: "ecb", actor: "test@ops", now: Self.now, on: db)
            let r = try report(db)
            #expect(r["snapshots"]!["start"]!["mrrMilli"] == 24_230)
            #expect(r["snapshots"]!["end"]!["mrrMilli"] == 45_627)
            let m = r["mrrMovement"]!
            #expect(m["new"] == 9_250)
            #expect(m["reactivation"] == 9_990)
            #expect(m["expansion"] == 3_000)
            #expect(m["contraction"] == 0)
            #expect(m["churned"] == -9_990)
            #expect(m["fx"] == 9_147)
            #expect(m["subscriptions"] == ["atStart": 3, "new": 1, "expansion": 1, "contraction": 0, "churned": 1, "reactivation": 1])
            #expect(r["derived"]!["churnRatePct"] == .double(33.3))
            // Without rates: only what is in EUR moves, and the sum still holds.
            try db.execute("DELETE FROM billing_exchange_rates")
            let eur = try report(db)
            let e = eur["mrrMovement"]!
            #expect(eur["snapshots"]!["start"]!["mrrMilli"] == 14_980)
            #expect(eur["snapshots"]!["end"]!["mrrMilli"] == 17_980)
            #expect([e["new"], e["reactivation"], e["expansion"], e["churned"], e["fx"]] == [0, 9_990, 3_000, -9_990, 0])
        }
    }

    /// Cohorts of the first fixture, [2026-02-01, 2026-04-01), now 04-10 (boundaries 03-01
    /// and 04-01):
    /// - February: C (02-20), F (02-10), G (02-28). At 03-01 all three pay; at 04-01 C
    ///   (renewed to 04-20) and G (yearly) do, F lapsed 03-10: 3, 3, 2 → 100, 100, 66.7 %.
    ///   Revenue: C's renewal 9315, G 55546 = 64861; C's first GBP 7990 and F's USD 9990 have
    ///   no rate (unconverted). LTV 64861 ÷ 3 = 21620.33 → 21620.
    /// - March: A, B, D, E (H has no paid period: in no cohort). At 04-01: A (to 04-01
    ///   12:00), B, E; D was refunded: 4, 3 → 100, 75 %. Revenue 9250 + 7411 + 18173 + 4990
    ///   = 39824, refunded 18173, net 21651; LTV 21651 ÷ 4 = 5412.75 → 5413.
    @Test func cohortsOfTheFixtureAsComputedByHand() throws {
        try withStatsDatabase { db in
            try Self.load(db)
            _ = try ExchangeRates.importRates(Self.entries(Self.ecb), source: "ecb", actor: "test@ops", now: Self.now, on: db)
            let q = SubscriptionStats.Query(
                from: Self.t("2026-02-01T00:00:00Z"), to: Self.to, environment: .production, currency: "EUR")
            let r = try SubscriptionStats.cohorts(q, now: Self.now, on: db)
            #expect(r["asOf"] == "2026-04-01T00:00:00.000Z")
            let rows = r["cohorts"]!.arrayValue!
            #expect(rows.map { $0["month"] } == ["2026-02", "2026-03"])
            let february = rows[0]
            #expect(february["subscribers"] == 3)
            #expect(
                february["retention"]
                    == [
                        ["index": 0, "paying": 3, "pct": 100.0], ["index": 1, "paying": 3, "pct": 100.0],
                        ["index": 2, "paying": 2, "pct": 66.7],
                    ])
            #expect(february["grossMilli"] == 64_861)
            #expect(february["refundedMilli"] == 0)
            #expect(february["ltvMilli"] == 21_620)
            #expect(
                february["unconverted"] == ["GBP": ["grossMilli": 7_990, "refundedMilli": 0], "USD": ["grossMilli": 9_990, "refundedMilli": 0]])
            let march = rows[1]
            #expect(march["subscribers"] == 4)
            #expect(march["retention"] == [["index": 0, "paying": 4, "pct": 100.0], ["index": 1, "paying": 3, "pct": 75.0]])
            #expect([march["grossMilli"], march["refundedMilli"], march["revenueMilli"]] == [39_824, 18_173, 21_651])
            #expect(march["ltvMilli"] == 5_413)
            #expect(march["unconverted"] == .object([:]))

            // Before the first boundary is reached (now 02-20): index 0 only.
            let early = try SubscriptionStats.cohorts(q, now: Self.t("2026-02-20T00:00:00Z"), on: db)
            #expect(early["cohorts"]!.arrayValue!.map { $0["retention"]!.arrayValue!.count } == [1, 1])
        }
    }

    func report(_ db: DatabaseConnection, currency: String = "EUR") throws -> JSON {
        try SubscriptionStats.compute(
            SubscriptionStats.Query(from: Self.from, to: Self.to, environment: .production, currency: currency),
            now: Self.now, cadence: { $0.hasSuffix("yearly") ? .yearly : .monthly }, on: db)
    }

    @Test func revenueAndMRRConvertAtEachPurchaseDaysRate() throws {
        try withStatsDatabase { db in
            try Self.load(db)
            let imported = try ExchangeRates.importRates(Self.entries(Self.ecb), source: "ecb", actor: "test@ops", now: Self.now, on: db)
            #expect(imported == ExchangeRates.ImportResult(inserted: 6, updated: 0, unchanged: 0))

            let r = try report(db)
            let current = r["counts"]!["current"]!
            #expect(current["grossMilli"] == 49_139)
            #expect(current["refundedMilli"] == 18_173)
            #expect(current["revenueMilli"] == 30_966)
            #expect(current["unconverted"] == .object([:]))
            // Per currency sold in: gross and refunded in it, and its converted net (the
            // parts of revenueMilli: 4990 + 9250 + 7411 + 9315 = 30966).
            #expect(
                current["byCurrency"]
                    == [
                        "EUR": ["grossMilli": 4_990, "refundedMilli": 0, "revenueMilli": 4_990],
                        "GBP": ["grossMilli": 7_990, "refundedMilli": 0, "revenueMilli": 9_315],
                        "JPY": ["grossMilli": 1_200_000, "refundedMilli": 0, "revenueMilli": 7_411],
                        "USD": ["grossMilli": 29_980, "refundedMilli": 19_990, "revenueMilli": 9_250],
                    ])
            let previous = r["counts"]!["previous"]!
            #expect(previous["grossMilli"] == 55_546)
            #expect(
                previous["unconverted"] == ["GBP": ["grossMilli": 7_990, "refundedMilli": 0], "USD": ["grossMilli": 9_990, "refundedMilli": 0]])

            let start = r["snapshots"]!["start"]!
            #expect(start["mrrMilli"] == 4_629)
            #expect(start["paying"] == 3)
            #expect(start["unconverted"] == ["GBP": ["subscriptions": 1, "mrrMilli": 7_990], "USD": ["subscriptions": 1, "mrrMilli": 9_990]])
            let end = r["snapshots"]!["end"]!
            #expect(end["mrrMilli"] == 35_595)
            #expect(end["paying"] == 6)
            #expect(end["unconverted"] == .object([:]))
            let byProduct = end["byProduct"]!.arrayValue!
            #expect(byProduct.map { $0["mrrMilli"] } == [30_966, 4_629])

            let usd = try report(db, currency: "USD")
            #expect(usd["counts"]!["current"]!["grossMilli"] == 53_744)
            #expect(usd["counts"]!["current"]!["refundedMilli"] == 19_990)
            #expect(usd["currency"] == "USD")
            // Refund rate: D's refund among the five sales of March (A, B, C's renewal, D, E).
            #expect(r["derived"]!["refundRatePct"] == .double(20.0))
            #expect(current["sales"] == 5)
            #expect(r["derived"]!["previousRefundRatePct"] == .double(0.0))
            // The movement: A, B, E new (9250 + 7411.07 + 4990 → 21651); C's MRR appears with
            // its renewal's rate and F's leaves unconverted, both fx: 30966 − 21651 = 9315.
            #expect(r["mrrMovement"]!["new"] == 21_651)
            #expect(r["mrrMovement"]!["fx"] == 9_315)
            #expect(r["mrrMovement"]!["churned"] == 0)
        }
    }

    @Test func withoutRatesEveryForeignAmountIsReportedApartNeverDropped() throws {
        try withStatsDatabase { db in
            try Self.load(db)
            let current = try report(db)["counts"]!["current"]!
            #expect(current["grossMilli"] == 4_990)
            #expect(
                current["unconverted"]
                    == [
                        "GBP": ["grossMilli": 7_990, "refundedMilli": 0], "JPY": ["grossMilli": 1_200_000, "refundedMilli": 0],
                        "USD": ["grossMilli": 29_980, "refundedMilli": 19_990],
                    ])
        }
    }

    @Test func reimportingIsIdempotentAndACorrectionReplacesTheValue() throws {
        try withStatsDatabase { db in
            try Self.load(db)
            _ = try ExchangeRates.importRates(Self.entries(Self.ecb), source: "ecb", actor: "test@ops", now: Self.now, on: db)
            let again = try ExchangeRates.importRates(Self.entries(Self.ecb), source: "ecb-again", actor: "test@ops", now: Self.now, on: db)
            #expect(again == ExchangeRates.ImportResult(inserted: 0, updated: 0, unchanged: 6))
            // The same value is left with its first source; a corrected one replaces it.
            let corrected = try ExchangeRates.importRates(
                Self.entries([("2026-03-16", "USD", "1.2000"), ("2026-03-17", "USD", "1.2100"), ("2026-03-02", "GBP", "0.85773")]),
                source: "correction", actor: "test@ops", now: Self.now, on: db)
            #expect(corrected == ExchangeRates.ImportResult(inserted: 1, updated: 1, unchanged: 1))
            let sources = try db.query("SELECT rate_date, source, per_eur FROM billing_exchange_rates WHERE currency = 'USD' ORDER BY rate_date")
            #expect(try sources.map { try $0.string("source") } == ["ecb", "ecb", "correction", "correction"])
            #expect(try sources.map { try $0.string("per_eur") } == ["1.08000000", "1.09000000", "1.20000000", "1.21000000"])
            // D now converts at 1.20: 19990 ÷ 1.2 = 16658.33 → 16658, sale and refund.
            let current = try report(db)["counts"]!["current"]!
            #expect(current["grossMilli"] == .int(49_139 - 18_173 + 16_658))
            #expect(current["refundedMilli"] == 16_658)
            let audits = try db.query("SELECT detail FROM audit_log WHERE action = 'rates.import' ORDER BY id")
            #expect(audits.count == 3)
            let last = try JSON.parse(try audits[2].string("detail"))
            #expect(last["source"] == "correction")
            #expect(last["from"] == "2026-03-02")
            #expect(last["to"] == "2026-03-17")
            #expect(last["inserted"] == 1)
            let listed = try ExchangeRates.list(currency: "USD", from: nil, to: nil, limit: 2, on: db)
            #expect(listed["rates"]?.arrayValue?.map { $0["date"] } == ["2026-03-17", "2026-03-16"])
            #expect(listed["currencies"]?.arrayValue?.map { $0["currency"] } == ["GBP", "JPY", "USD"])
            #expect(listed["currencies"]?.arrayValue?.last?["latestPerEUR"] == "1.21")
        }
    }
}
