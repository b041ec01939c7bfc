import Testing

@testable import Core

@Suite struct RevenueCatDecodingTests {
    let tiers = TierResolver(
        rules: [("pro", .pro), ("plus", .plus)],
        products: ["app.x.pro.yearly": .init(tier: .pro, cadence: .yearly)])
    let user = "6f1c1a8e-8a4e-4f37-9a44-1d2b3c4d5e6f"
    let alias = "0a1b2c3d-0000-4000-8000-000000000001"

    func body(_ event: JSON) -> JSON { ["api_version": "1.0", "event": event] }

    /// The tier rules match the lower-cased id, wherever the rule's text occurs in it: for
    /// every id (ASCII in any case, at the edges, too short, non-ASCII) and rule order, the
    /// resolver gives what `id.lowercased().contains(match)` over the rules in order gives.
    @Test func tierRulesMatchTheLowercasedIdAnywhere() {
        let rules: [[(match: String, tier: Tier)]] = [
            [("pro", .pro), ("plus", .plus)], [("plus", .plus), ("pro", .pro)], [("prémium", .pro), ("p", .plus)],
            [("app.plus", .plus)], [("ß", .pro), ("ss", .plus)],
        ]
        let ids = [
            "pro", "PRO", "Pro", "app.PLUS.monthly", "app.plus", "apP.Plu", "xpr", "p", "", "plusPro", "PROPLUS",
            "com.x.Prémium", "COM.X.PRÉMIUM", "straße", "STRASSE", "İpro", "app.pr\u{0301}o", "ＰＲＯ", "prp.ro",
        ]
        for order in rules {
            let resolver = TierResolver(rules: order, products: [:])
            for id in ids {
                let expected = order.first { id.lowercased().contains($0.match) }?.tier
                #expect(resolver.tier(entitlementIds: [], productId: id) == expected, "\(id) with \(order.map(\.match))")
                #expect(resolver.tier(entitlementIds: [id], productId: nil) == expected, "\(id) with \(order.map(\.match))")
            }
        }
    }

    @Test func decodesAnInitialTrialPurchase() throws {
        let d = try RevenueCatDelivery.decode(
            body([
                "id": "EVT-1", "type": "INITIAL_PURCHASE", "app_user_id": "$RCAnonymousID:abc",
                "original_app_user_id": .string(user), "aliases": ["$RCAnonymousID:abc", .string(user), .string(alias)],
                "product_id": "app.x.plus.monthly", "entitlement_ids": ["Plus"], "period_type": "TRIAL",
                "purchased_at_ms": 1_700_000_000_000, "expiration_at_ms": 1_700_604_800_000,
                "event_timestamp_ms": 1_700_000_000_500, "environment": "SANDBOX", "store": "APP_STORE",
                "original_transaction_id": "2000000123", "price_in_purchased_currency": 9.99, "currency": "eur",
            ]), tiers: tiers, idPattern: .uuid)
        #expect(d.userCandidates == [user, alias], "anonymous ids never name a user; duplicates dropped")
        let e = d.event
        #expect(e.kind == .purchase && e.rawType == "INITIAL_PURCHASE")
        #expect(e.tier == .plus && e.isTrial && e.periodType == "TRIAL")
        #expect(e.environment == .sandbox && e.platform == "app_store")
        #expect(e.subscriptionId == "2000000123")
        #expect(e.priceMilli == 9990 && e.currency == "EUR")
        #expect(e.intrinsicAt == Timestamp(millisecondsSinceEpoch: 1_700_000_000_500))
        #expect(e.expiresAt == Timestamp(millisecondsSinceEpoch: 1_700_604_800_000))
    }

    /// Found by schemathesis: these reached the inbox's CHECK constraints and answered 500.
    @Test func currencyIsNeverLeftForTheDatabaseToRefuse() throws {
        func decode(_ extra: JSONObject) throws -> StoreEvent {
            var event: JSONObject = ["id": "EVT-C", "type": "RENEWAL", "app_user_id": .string(user), "event_timestamp_ms": 1_700_000_000_000]
            for (key, value) in extra { event[key] = value }
            return try RevenueCatDelivery.decode(body(.object(event)), tiers: tiers, idPattern: .uuid).event
        }
        // An empty currency is no currency: a local price without one is unknown, not a 500.
        let empty = try decode(["currency": "", "price_in_purchased_currency": 1.5])
        #expect(empty.priceMilli == nil && empty.currency == nil)
        let missing = try decode(["price_in_purchased_currency": 1.5])
        #expect(missing.priceMilli == nil && missing.currency == nil)
        // The USD price still counts when the local currency is unusable.
        let usd = try decode(["currency": "", "price_in_purchased_currency": 1.5, "price": 1.99])
        #expect(usd.priceMilli == 1990 && usd.currency == "USD")
        for bad in ["E1R", "éA", "12", "€"] {
            #expect(throws: PayloadError.self, "\(bad)") { try decode(["currency": .string(bad), "price": 1]) }
        }
        let fine = try decode(["currency": "chf", "price_in_purchased_currency": 2])
        #expect(fine.priceMilli == 2000 && fine.currency == "CHF")
    }

    @Test func mapsEveryType() throws {
        let cases: [(String, EventKind)] = [
            ("INITIAL_PURCHASE", .purchase), ("RENEWAL", .renewal), ("CANCELLATION", .cancellation),
            ("UNCANCELLATION", .uncancellation), ("EXPIRATION", .expiration), ("BILLING_ISSUE", .billingIssue),
            ("PRODUCT_CHANGE", .productChange), ("NON_RENEWING_PURCHASE", .nonRenewingPurchase),
            ("SUBSCRIPTION_EXTENDED", .extension), ("SUBSCRIPTION_PAUSED", .pause),
            ("TEMPORARY_ENTITLEMENT_GRANT", .temporaryGrant), ("REFUND_REVERSED", .refundReversed),
            ("PROMOTIONAL", .promotional), ("TRANSFER", .transfer), ("TEST", .test), ("SOMETHING_NEW", .unknown),
        ]
        for (type, kind) in cases {
            let d = try RevenueCatDelivery.decode(body(["id": "e", "type": .string(type), "event_timestamp_ms": 1]), tiers: tiers, idPattern: .uuid)
            #expect(d.event.kind == kind, "\(type)")
        }
        let refund = try RevenueCatDelivery.decode(
            body(["id": "e", "type": "CANCELLATION", "cancel_reason": "CUSTOMER_SUPPORT"]), tiers: tiers, idPattern: .uuid)
        #expect(refund.event.kind == .refund)
        // A failed charge, sent beside BILLING_ISSUE: a billing issue, never a cancellation.
        let billingError = try RevenueCatDelivery.decode(
            body(["id": "e", "type": "CANCELLATION", "cancel_reason": "BILLING_ERROR"]),
            tiers: tiers, idPattern: .uuid)
        #expect(billingError.event.kind == .billingIssue && billingError.event.cancelReason == "BILLING_ERROR")
        for reason in ["UNSUBSCRIBE", "DEVELOPER_INITIATED", "PRICE_INCREASE", "UNKNOWN"] {
            let d = try RevenueCatDelivery.decode(
                body(["id": "e", "type": "CANCELLATION", "cancel_reason": .string(reason)]),
                tiers: tiers, idPattern: .uuid)
            #expect(d.event.kind == .cancellation, "\(reason)")
        }
    }

    @Test func intrinsicTimeFallsBackToExpirationAndIsAbsentWithoutEither() throws {
        let a = try RevenueCatDelivery.decode(body(["id": "e", "type": "EXPIRATION", "expiration_at_ms": 5000]), tiers: tiers, idPattern: .uuid)
        #expect(a.event.intrinsicAt == Timestamp(millisecondsSinceEpoch: 5000))
        let b = try RevenueCatDelivery.decode(body(["id": "e", "type": "CANCELLATION"]), tiers: tiers, idPattern: .uuid)
        #expect(b.event.intrinsicAt == nil && !b.event.isApplicable)
    }

    @Test func tiersFromEntitlementsThenCatalogThenProductId() throws {
        #expect(tiers.tier(entitlementIds: ["plus", "PRO_access"], productId: nil) == .pro)
        #expect(tiers.tier(entitlementIds: [], productId: "app.x.pro.yearly") == .pro)
        #expect(tiers.tier(entitlementIds: [], productId: "app.x.plus.weekly") == .plus)
        #expect(tiers.tier(entitlementIds: ["premium"], productId: "coins") == nil)
        let change = try RevenueCatDelivery.decode(
            body([
                "id": "e", "type": "PRODUCT_CHANGE", "product_id": "app.x.plus.monthly",
                "new_product_id": "app.x.pro.yearly", "entitlement_ids": ["plus"],
            ]),
            tiers: tiers, idPattern: .uuid)
        #expect(change.event.tier == .plus && change.event.newTier == .pro && change.event.newProductId == "app.x.pro.yearly")
    }

    @Test func transferKeepsOnlyIdsThatCanNameUsers() throws {
        let d = try RevenueCatDelivery.decode(
            body([
                "id": "t", "type": "TRANSFER", "event_timestamp_ms": 1,
                "transferred_from": ["$RCAnonymousID:x", .string(user)],
                "transferred_to": [.string(alias)],
            ]), tiers: tiers, idPattern: .uuid)
        #expect(d.event.transferredFrom == [user] && d.event.transferredTo == [alias])
        #expect(d.userCandidates.isEmpty)
    }

    @Test func rejectsBodiesThatCanNeverApplyWithThePreciseField() {
        let bad: [(JSON, String)] = [
            ([:], "event"),
            (["event": "x"], "event"),
            (["event": ["type": "RENEWAL"]], "event.id"),
            (["event": ["id": "", "type": "RENEWAL"]], "event.id"),
            (["event": ["id": 5, "type": "RENEWAL"]], "event.id"),
            (["event": ["id": "a", "type": ["x"]]], "event.type"),
            (["event": ["id": "a", "type": "RENEWAL", "expiration_at_ms": "soon"]], "event.expiration_at_ms"),
            (["event": ["id": "a", "type": "RENEWAL", "event_timestamp_ms": -5]], "event.event_timestamp_ms"),
            (["event": ["id": "a", "type": "RENEWAL", "aliases": "u"]], "event.aliases"),
            (["event": ["id": "a", "type": "RENEWAL", "environment": "STAGING"]], "event.environment"),
            (["event": ["id": .string(String(repeating: "x", count: 300)), "type": "RENEWAL"]], "event.id"),
            ([1, 2], ""),
        ]
        for (value, field) in bad {
            do {
                _ = try RevenueCatDelivery.decode(value, tiers: tiers, idPattern: .uuid)
                Issue.record("accepted \(value)")
            } catch {
                #expect(error.field == field, "\(value): \(error)")
            }
        }
    }

    @Test func idPattern() {
        #expect(UserIdPattern.uuid.matches(user))
        #expect(!UserIdPattern.uuid.matches("$RCAnonymousID:\(user)"))
        #expect(!UserIdPattern.uuid.matches("not-a-uuid"))
        #expect(!UserIdPattern.uuid.matches(user + "x"))
        let any = UserIdPattern("^[a-z0-9_-]+$")!
        #expect(any.matches("alice_1"))
        #expect(!any.matches(String(repeating: "a", count: 129)))
        #expect(UserIdPattern("(") == nil)
    }
}
