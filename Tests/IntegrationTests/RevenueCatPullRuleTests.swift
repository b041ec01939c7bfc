import Foundation
import Testing

@testable import Core

/// The rule of SPEC §15 on the real database: a subscriber state pulled from RevenueCat and
/// a webhook racing it give the same access whichever arrives first. Every pulled state ×
/// every webhook it can race with × the webhook's time before or after the pull's
/// `request_date_ms` × every arrival order of the pull, the racing webhook and the first
/// purchase's webhook (so a pull may come before any webhook named its subscription): the
/// orders' stored projections and snapshots are equal, each equals a re-fold from the inbox (`events.reproject` finds no
/// difference), and the same state pulled again adds no event.
@Suite struct RevenueCatPullRuleTests {
    static let now = Timestamp(millisecondsSinceEpoch: 1_780_000_000_000)
    static let hour: Int64 = 3_600_000, day: Int64 = 86_400_000
    static func ms(_ offset: Int64) -> Int64 { now.millisecondsSinceEpoch + offset }
    /// A date as RevenueCat's REST API writes it: whole seconds.
    static func iso(_ offset: Int64) -> JSON {
        let text = Timestamp(millisecondsSinceEpoch: ms(offset)).iso8601
        return .string(String(text.prefix(19)) + "Z")
    }
    /// When RevenueCat answered the pull.
    static let requested = -1 * hour

    /// Subscription entries of CustomerInfo, by name.
    static let pulledStates: [(String, JSONObject)] = [
        ("renewed", entry(purchase: -10 * day, expires: 20 * day)),
        ("renewed, auto-renew off", entry(purchase: -10 * day, expires: 20 * day, unsubscribed: -2 * day)),
        ("billing issue in grace", entry(purchase: -40 * day, expires: -1 * day, billingIssue: -1 * day, grace: 5 * day)),
        ("billing issue, retrying", entry(purchase: -40 * day, expires: -1 * day, billingIssue: -1 * day)),
        ("expired", entry(purchase: -40 * day, expires: -10 * day, unsubscribed: -12 * day)),
        ("refunded", entry(purchase: -10 * day, expires: 20 * day, refunded: -2 * day)),
        ("family shared", entry(purchase: -10 * day, expires: 20 * day, familyShared: true)),
        ("first period still running", entry(purchase: -40 * day, expires: 5 * day)),
    ]

    static func entry(
        purchase: Int64, expires: Int64, unsubscribed: Int64? = nil, billingIssue: Int64? = nil,
        grace: Int64? = nil, refunded: Int64? = nil, familyShared: Bool = false
    ) -> JSONObject {
        [
            "purchase_date": iso(purchase), "original_purchase_date": iso(-40 * day), "expires_date": iso(expires),
            "period_type": "normal", "store": "app_store", "is_sandbox": false,
            "unsubscribe_detected_at": unsubscribed.map(iso) ?? .null, "billing_issues_detected_at": billingIssue.map(iso) ?? .null,
            "grace_period_expires_date": grace.map(iso) ?? .null, "refunded_at": refunded.map(iso) ?? .null,
            "ownership_type": familyShared ? "FAMILY_SHARED" : "PURCHASED", "auto_resume_date": .null,
            "store_transaction_id": "2000000999",
        ]
    }

    /// Webhook events (RevenueCat's shape) of the same subscription, by name: type and fields.
    static let webhooks: [(String, JSONObject)] = [
        ("RENEWAL", ["type": "RENEWAL", "purchased_at_ms": .int(ms(-10 * day)), "expiration_at_ms": .int(ms(20 * day))]),
        (
            "CANCELLATION",
            [
                "type": "CANCELLATION", "cancel_reason": "UNSUBSCRIBE", "purchased_at_ms": .int(ms(-10 * day)),
                "expiration_at_ms": .int(ms(20 * day)),
            ]
        ),
        ("UNCANCELLATION", ["type": "UNCANCELLATION", "purchased_at_ms": .int(ms(-10 * day)), "expiration_at_ms": .int(ms(20 * day))]),
        (
            "BILLING_ISSUE",
            [
                "type": "BILLING_ISSUE", "purchased_at_ms": .int(ms(-40 * day)), "expiration_at_ms": .int(ms(-1 * day)),
                "grace_period_expiration_at_ms": .int(ms(5 * day)),
            ]
        ),
        (
            "EXPIRATION",
            [
                "type": "EXPIRATION", "expiration_reason": "UNSUBSCRIBE", "purchased_at_ms": .int(ms(-40 * day)),
                "expiration_at_ms": .int(ms(-10 * day)),
            ]
        ),
        (
            "refund",
            [
                "type": "CANCELLATION", "cancel_reason": "CUSTOMER_SUPPORT", "purchased_at_ms": .int(ms(-10 * day)),
                "expiration_at_ms": .int(ms(20 * day)),
            ]
        ),
        (
            "PRODUCT_CHANGE",
            [
                "type": "PRODUCT_CHANGE", "new_product_id": "app.pro.monthly", "purchased_at_ms": .int(ms(-10 * day)),
                "expiration_at_ms": .int(ms(20 * day)),
            ]
        ),
    ]

    let tiers = TierResolver(rules: [("pro", .pro), ("plus", .plus)], products: [:])

    func webhook(_ fields: JSONObject, user: String, subscription: String, at offset: Int64) throws -> RevenueCatDelivery {
        var event: JSONObject = [
            "id": .string(UUID().uuidString), "app_user_id": .string(user), "original_app_user_id": .string(user),
            "original_transaction_id": .string(subscription), "product_id": "app.plus.monthly",
            "entitlement_ids": ["plus"], "period_type": "NORMAL", "environment": "PRODUCTION",
            "store": "APP_STORE", "event_timestamp_ms": .int(Self.ms(offset)),
            "price_in_purchased_currency": 4.99, "currency": "EUR",
        ]
        for (key, value) in fields { event[key] = value }
        // Webhooks state milliseconds, the REST API whole seconds: one purchase, one period.
        if let purchased = event["purchased_at_ms"]?.int64Value { event["purchased_at_ms"] = .int(purchased + 123) }
        return try RevenueCatDelivery.decode(["api_version": "1.0", "event": .object(event)], tiers: tiers, idPattern: .uuid)
    }

    func ingest(_ d: RevenueCatDelivery, on db: DatabaseConnection) throws {
        _ = try EventIngestion.ingest(d.event, payload: d.payload, subjectCandidates: d.userCandidates, now: Self.now, on: db)
    }

    /// Records one pull of `entry` for `user` as billing-rpc does; returns the events it added.
    func pull(_ entry: JSONObject, user: String, reconciler: RevenueCatReconciler, on db: DatabaseConnection) throws -> Int {
        let info: JSON = [
            "request_date_ms": .int(Self.ms(Self.requested)),
            "subscriber": [
                "subscriptions": ["app.plus.monthly": .object(entry)],
                "entitlements": ["plus": ["product_identifier": "app.plus.monthly"]],
            ],
        ]
        let subscriber = try RevenueCatSubscriber.decode(info, appUserId: user, tiers: tiers, catalog: [:])
        let outcome = try db.transaction(retries: 3, isolation: .readCommitted) { db in
            try reconciler.record(subscriber, userId: user, now: Self.now, on: db)
        }
        return outcome.eventsAdded
    }

    /// What a user's access is, without what names him or his subscription.
    func judged(_ user: String, subscription: String, on db: DatabaseConnection) throws -> String {
        let snapshot = try #require(try AccessSnapshot.load(userId: user, now: Self.now, cadence: { _ in nil }, on: db))
        var rows = try RevenueCatReconciler.subscriptions(userId: user, on: db).map { s -> String in
            var s = s
            s.subscriptionId = s.subscriptionId == subscription ? "S" : s.subscriptionId
            s.provider = .revenuecat
            return "\(s)"
        }
        rows.sort()
        let store = snapshot.store
        return "tier \(snapshot.sources.first?.tier.rawValue ?? "free") phase \(store?.phase(at: Self.now).rawValue ?? "none") "
            + "expires \(store?.expiresAt?.iso8601 ?? "-") renews \(store?.willRenew ?? false) "
            + "pending \(store?.pendingChange?.productId ?? "-") | " + rows.joined(separator: " ; ")
    }

    @Test func everyPulledStateAndWebhookGiveTheSameAccessInEitherArrivalOrder() throws {
        try withMigratedDatabase { db in
            let api = RevenueCatAPI(
                apiKey: "sk_unused", baseURL: "https://127.0.0.1:9",
                client: ProviderAPIClient(
                    http: CurlHTTPClient(
                        timeoutMilliseconds: 100, connectTimeoutMilliseconds: 100,
                        caFile: nil),
                    maxAttempts: 1, maxRetryAfterSeconds: 0, errorCodeMember: "code"))
            let reconciler = RevenueCatReconciler(api: api, tiers: tiers, catalog: [:])
            var combinations = 0
            var healed = 0
            for (stateName, entry) in Self.pulledStates {
                for (webhookName, fields) in Self.webhooks {
                    for offset in [Self.requested - 2 * Self.hour, Self.requested + Self.hour / 2] {
                        var judgments: [String] = []
                        // Every arrival order of the first purchase's webhook, the racing webhook
                        // and the pull (a pull may come before any webhook named the subscription).
                        for order in [[0, 1, 2], [0, 2, 1], [1, 0, 2], [1, 2, 0], [2, 0, 1], [2, 1, 0]] {
                            let user = UUID().uuidString.lowercased()
                            let subscription = "2000000" + String(UInt32.random(in: 100_000_000...999_999_999))
                            try UserDirectory.ensureKnown(
                                user, source: .token, createdAt: Self.now.adding(milliseconds: -50 * Self.day),
                                now: Self.now, on: db)
                            let first = try webhook(
                                [
                                    "type": "INITIAL_PURCHASE", "purchased_at_ms": .int(Self.ms(-40 * Self.day)),
                                    "expiration_at_ms": .int(Self.ms(-10 * Self.day)),
                                ],
                                user: user, subscription: subscription, at: -40 * Self.day)
                            let racing = try webhook(fields, user: user, subscription: subscription, at: offset)
                            for step in order {
                                switch step {
                                case 0: try ingest(first, on: db)
                                case 1: try ingest(racing, on: db)
                                default: #expect(try pull(entry, user: user, reconciler: reconciler, on: db) == 1)
                                }
                            }
                            #expect(
                                try pull(entry, user: user, reconciler: reconciler, on: db) == 0,
                                "\(stateName) × \(webhookName): the same state pulled twice is one event")
                            let (differences, _) = try EventAdmin.reproject(userId: user, actor: "rule-test", now: Self.now, on: db)
                            #expect(differences.isEmpty, "\(stateName) × \(webhookName) at \(offset): stored = re-fold")
                            judgments.append(try judged(user, subscription: subscription, on: db))
                            combinations += 1
                        }
                        for (index, judgment) in judgments.enumerated() where judgment != judgments[0] {
                            Issue.record(
                                "\(stateName) × \(webhookName) at \(offset / Self.hour)h: order 0 gives \(judgments[0]), order \(index) \(judgment)")
                        }
                        if offset < Self.requested, stateName == "renewed", judgments[0].hasPrefix("tier plus phase active") { healed += 1 }
                        // Webhooks that state nothing newer than the pulled period cannot bring access back.
                        let statesNoNewerPeriod = ["BILLING_ISSUE", "EXPIRATION", "CANCELLATION", "UNCANCELLATION", "PRODUCT_CHANGE"]
                        if offset < Self.requested, stateName == "refunded", statesNoNewerPeriod.contains(webhookName) {
                            #expect(judgments[0].hasPrefix("tier free"), "\(webhookName) before a refund seen by pulling: no access")
                        }
                        if offset < Self.requested, stateName == "expired", ["BILLING_ISSUE", "EXPIRATION"].contains(webhookName) {
                            #expect(judgments[0].hasPrefix("tier free"), "\(webhookName) before the pulled expiry: no access")
                        }
                    }
                }
            }
            #expect(combinations == Self.pulledStates.count * Self.webhooks.count * 2 * 6)
            // An older webhook never undoes the pulled renewal (PRODUCT_CHANGE and the
            // billing issue state no period; the refund takes that very period back).
            #expect(healed >= 4, "healed \(healed)")
        }
    }
}
