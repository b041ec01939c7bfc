import Testing

@testable import Core

/// The rule of a Google Play state's period (`GooglePlayIngestion.periodStart`, docs/stats.md
/// "Google Play"): whatever order the reads of a subscription's orders arrive in — the first
/// order read twice, its renewal `..0` read active and then in grace, the next renewal `..1`
/// — every read of one order states one start, no two orders the same one (starts grow with
/// the order), each within [startTime, its expiry]; and where the orders first arrive in
/// their own order, a renewal starts exactly where the order before it was paid to (`..1`
/// once `..0`'s paid read is in). A later order read before an earlier one takes the start it
/// can see, and the earlier one then starts a millisecond before it: two sales still, never
/// one. Each of the 120
/// arrival orders is a subscription of its own.
@Suite struct PlayPeriodRuleTests {
    struct Read {
        var order: String
        var readDay: Int64
        var expiryDay: Int64
        var inRetry = false
    }

    static let day: Int64 = 86_400_000
    static let t0 = Timestamp(iso8601: "2026-01-05T10:00:00Z")!
    static let first = "GPA.3301-2202-1103-40404"
    static let reads = [
        Read(order: first, readDay: 1, expiryDay: 30), Read(order: first, readDay: 20, expiryDay: 30),
        Read(order: first + "..0", readDay: 31, expiryDay: 60), Read(order: first + "..0", readDay: 61, expiryDay: 63, inRetry: true),
        Read(order: first + "..1", readDay: 64, expiryDay: 93),
    ]

    static func at(_ days: Int64) -> Timestamp { t0.adding(milliseconds: days * day) }

    /// Every order of `items` (Heap's algorithm).
    static func arrivals(_ items: [Int]) -> [[Int]] {
        var a = items
        var out = [items]
        var c = Array(repeating: 0, count: items.count)
        var i = 0
        while i < a.count {
            if c[i] < i {
                a.swapAt(i % 2 == 0 ? 0 : c[i], i)
                out.append(a)
                c[i] += 1
                i = 0
            } else {
                c[i] = 0
                i += 1
            }
        }
        return out
    }

    @Test func everyArrivalOrderGivesEachOrderOneStartOfItsOwn() throws {
        try withMigratedDatabase { db in
            for (n, arrival) in Self.arrivals(Array(Self.reads.indices)).enumerated() {
                let subscription = "gp:rule-\(n)"
                for (k, i) in arrival.enumerated() {
                    let r = Self.reads[i]
                    var event = StoreEvent(
                        provider: .googlePlay, providerEventId: "rule-\(n)-\(k)", rawType: "PULL/ACTIVE", kind: .subscriberState,
                        intrinsicAt: Self.at(r.readDay), subscriptionId: subscription, platform: "google_play",
                        purchasedAt: Self.t0, expiresAt: Self.at(r.expiryDay), inBillingRetry: r.inRetry, transactionId: r.order)
                    event.purchasedAt = try GooglePlayIngestion.periodStart(event, on: db)
                    _ = try EventInbox.insert(
                        event, payload: [:], userId: nil, status: .unmatched, statusReason: nil, receivedAt: Self.at(r.readDay), on: db)
                }
                var starts: [String: Set<Int64>] = [:]
                for row in try db.query("SELECT transaction_id, purchased_at FROM billing_events WHERE subscription_id = \(subscription)") {
                    starts[try row.string("transaction_id"), default: []].insert(try row.timestamp("purchased_at").millisecondsSinceEpoch)
                }
                let orders = [Self.first, Self.first + "..0", Self.first + "..1"]
                #expect(orders.allSatisfy { starts[$0]?.count == 1 }, "arrival \(arrival): one start per order \(starts)")
                let start = orders.map { starts[$0]?.first ?? 0 }
                #expect(start[0] < start[1] && start[1] < start[2], "arrival \(arrival): the starts grow with the order \(start)")
                for (o, expiry) in zip(start, [30, 63, 93] as [Int64]) {
                    #expect(o >= Self.t0.millisecondsSinceEpoch && o <= Self.at(expiry).millisecondsSinceEpoch, "arrival \(arrival)")
                }
                #expect(start[0] == Self.t0.millisecondsSinceEpoch, "arrival \(arrival): the first order starts at startTime")
                // A renewal recorded after its earlier order's paid read starts where that period ended.
                let firstOf = { (order: String) in arrival.firstIndex { Self.reads[$0].order == order }! }
                let inOrder = firstOf(Self.first) < firstOf(Self.first + "..0") && firstOf(Self.first + "..0") < firstOf(Self.first + "..1")
                if inOrder {
                    #expect(start[1] == Self.at(30).millisecondsSinceEpoch, "arrival \(arrival): ..0 starts at the first period's end")
                }
                if inOrder, let paid = arrival.firstIndex(of: 2), paid < firstOf(Self.first + "..1") {
                    #expect(start[2] == Self.at(60).millisecondsSinceEpoch, "arrival \(arrival): ..1 starts at ..0's paid end")
                }
            }
        }
    }

    @Test func theOrderIndexIsTheRenewalSuffix() {
        #expect(GooglePlayIngestion.orderIndex("GPA.3301-2202-1103-40404") == -1)
        #expect(GooglePlayIngestion.orderIndex("GPA.3301-2202-1103-40404..0") == 0)
        #expect(GooglePlayIngestion.orderIndex("GPA.3301-2202-1103-40404..12") == 12)
        #expect(GooglePlayIngestion.orderIndex("GPA.3301..x") == -1)
        #expect(GooglePlayIngestion.orderIndex("") == -1)
    }
}
