import Testing

@testable import Core

/// stats.subscriptions follows the entitlement rules (SPEC §5, docs/stats.md): a billing
/// error is a billing issue, not a cancellation, and grace keeps the subscription active
/// in either order of its two notices; a refund of an earlier period takes back that period
/// only; a revocation is counted apart from refunds and refunds no money.
@Suite struct EntitlementStatsTests {
    static let from = Timestamp(iso8601: "2026-03-01T00:00:00Z")!, to = Timestamp(iso8601: "2026-04-01T00:00:00Z")!
    static let now = Timestamp(iso8601: "2026-04-10T12:00:00Z")!

    @Test func billingErrorsRefundsOfEarlierPeriodsAndRevocations() throws {
        try withStatsDatabase { db in
            typealias Row = StatsFixture.Row
            var n = 0
            func add(_ r: Row) throws {
                n += 1
                try StatsFixture.insert(r, id: "er-\(n)", on: db)
            }
            // G1, G2: a renewal charge fails on 03-10 with grace to 04-05; RevenueCat sends
            // BILLING_ISSUE (with the grace end) and CANCELLATION/BILLING_ERROR (without),
            // the notice after (G1) and before (G2) the billing issue.
            for (sub, noticeFirst) in [("G1", false), ("G2", true)] {
                try add(
                    Row(
                        kind: "purchase", sub: sub, price: 9990, purchased: "2026-02-10T00:00:00Z",
                        expires: "2026-03-10T00:00:00Z", at: "2026-02-10T00:00:00Z", user: "U1"))
                try add(
                    Row(
                        kind: "billing_issue", sub: sub, purchased: "2026-02-10T00:00:00Z", expires: "2026-03-10T00:00:00Z",
                        grace: "2026-04-05T00:00:00Z", at: noticeFirst ? "2026-03-10T02:00:00Z" : "2026-03-10T01:00:00Z", user: "U1"))
                try add(
                    Row(
                        kind: "billing_issue", sub: sub, purchased: "2026-02-10T00:00:00Z", expires: "2026-03-10T00:00:00Z",
                        at: noticeFirst ? "2026-03-10T01:00:00Z" : "2026-03-10T02:00:00Z", user: "U1", reason: "BILLING_ERROR"))
            }
            // R1: three monthly periods; the first one's refund arrives in the third.
            for (purchased, expires) in [("2026-01-20", "2026-02-20"), ("2026-02-20", "2026-03-20"), ("2026-03-20", "2026-04-20")] {
                try add(
                    Row(
                        provider: "apple_notification", kind: purchased == "2026-01-20" ? "purchase" : "renewal", sub: "R1",
                        price: 9990, purchased: "\(purchased)T00:00:00Z", expires: "\(expires)T00:00:00Z",
                        at: "\(purchased)T00:00:00Z", user: "U2"))
            }
            try add(
                Row(
                    provider: "apple_notification", kind: "refund", sub: "R1", price: 9990, purchased: "2026-01-20T00:00:00Z",
                    expires: "2026-03-25T00:00:00Z", at: "2026-03-25T00:00:00Z", user: "U2"))
            // V1: a Family Sharing member's access revoked.
            try add(
                Row(
                    provider: "apple_notification", kind: "purchase", sub: "V1", price: 4990, purchased: "2026-03-05T00:00:00Z",
                    expires: "2026-04-05T00:00:00Z", at: "2026-03-05T00:00:00Z", user: "U3"))
            try add(
                Row(
                    provider: "apple_notification", kind: "revoke", sub: "V1", price: 4990, purchased: "2026-03-05T00:00:00Z",
                    expires: "2026-03-15T00:00:00Z", at: "2026-03-15T00:00:00Z", user: "U3"))

            let r = try SubscriptionStats.compute(
                SubscriptionStats.Query(from: Self.from, to: Self.to, environment: .production, currency: "EUR", timeZone: nil),
                now: Self.now, cadence: { _ in .monthly }, on: db)
            let c = r["counts"]!["current"]!
            #expect(c["billingIssues"]?.int64Value == 2, "one per failed period, not one per notice")
            #expect(c["cancellations"]?.int64Value == 0, "a billing error is not a cancellation")
            #expect(c["refunds"]?.int64Value == 1)
            #expect(c["revocations"]?.int64Value == 1)
            #expect(c["refundedMilli"]?.int64Value == 9990, "a revocation refunds no money")
            let end = r["snapshots"]!["end"]!
            // G1 and G2 in grace to 04-05, R1's third period standing; V1 revoked.
            #expect(end["active"]?.int64Value == 3)
            #expect(end["paying"]?.int64Value == 3)
        }
    }
}
