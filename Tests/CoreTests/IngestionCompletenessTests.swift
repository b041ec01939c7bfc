import Testing

@testable import Core

/// SPEC §15 in pure Core: the catalog's one-time products, RevenueCat's CustomerInfo as
/// pulled events, and how the fold reads a pulled subscriber state.
@Suite struct CatalogDurationTests {
    @Test func parsesWholeCalendarUnitsInOrderOnly() {
        #expect(CatalogDuration("P1M") == CatalogDuration(years: 0, months: 1, days: 0))
        #expect(CatalogDuration("P1Y6M") == CatalogDuration(years: 1, months: 6, days: 0))
        #expect(CatalogDuration("P2W") == CatalogDuration(years: 0, months: 0, days: 14))
        #expect(CatalogDuration("P1Y2M3W4D") == CatalogDuration(years: 1, months: 2, days: 25))
        for bad in ["", "P", "1M", "PM", "P1", "P1M1Y", "P1M1M", "PT1H", "P1MT1H", "P-1M", "P0D", "p1m", "P1.5M", "P 1M", "P123456D"] {
            #expect(CatalogDuration(bad) == nil, "\(bad)")
        }
    }

    @Test func monthsMoveTheCalendarAndClampToTheMonthsLastDay() {
        func after(_ duration: String, _ start: String) -> String {
            CatalogDuration(duration)!.after(Timestamp(iso8601: start)!).iso8601
        }
        #expect(after("P1M", "2026-01-31T10:00:00Z") == "2026-02-28T10:00:00.000Z")
        #expect(after("P1M", "2028-01-31T10:00:00Z") == "2028-02-29T10:00:00.000Z")
        #expect(after("P1Y", "2028-02-29T00:00:00Z") == "2029-02-28T00:00:00.000Z")
        #expect(after("P12M", "2026-12-15T23:59:59Z") == "2027-12-15T23:59:59.000Z")
        #expect(after("P1M", "2026-12-15T00:00:00Z") == "2027-01-15T00:00:00.000Z")
        #expect(after("P30D", "2026-02-01T00:00:00Z") == "2026-03-03T00:00:00.000Z")
        #expect(after("P1M1D", "2026-01-31T00:00:00Z") == "2026-03-01T00:00:00.000Z")
    }

    @Test func theCatalogSaysWhatAOneTimeProductGrants() throws {
        let config = try BillingConfiguration(json: [
            "products": [
                "app.pro.lifetime": ["tier": "pro", "cadence": "lifetime"],
                "app.plus.pass": ["tier": "plus", "cadence": "non_renewing", "duration": "P1M"],
                "app.coins": ["cadence": "consumable"],
                "app.plus.monthly": ["tier": "plus", "cadence": "monthly"],
            ]
        ])
        let start = Timestamp(iso8601: "2026-01-31T10:00:00Z")!
        #expect(config.products["app.pro.lifetime"]?.oneTimeExpiry(purchasedAt: start) == .some(nil))
        #expect(config.products["app.plus.pass"]?.oneTimeExpiry(purchasedAt: start) == .some(Timestamp(iso8601: "2026-02-28T10:00:00Z")))
        #expect(config.products["app.coins"]?.tier == nil)
        #expect(config.products["app.plus.monthly"]?.oneTimeExpiry(purchasedAt: start) == nil, "a subscription states its own expiry")
        for bad: JSON in [
            ["tier": "plus", "cadence": "non_renewing"], ["tier": "plus", "cadence": "monthly", "duration": "P1M"],
            ["tier": "plus", "cadence": "non_renewing", "duration": "one month"], ["cadence": "monthly"],
        ] {
            #expect(throws: ConfigurationError.self, "\(bad)") { try BillingConfiguration(json: ["products": ["p": bad]]) }
        }
    }
}

@Suite struct RevenueCatSubscriberTests {
    let tiers = TierResolver(rules: [("pro", .pro), ("plus", .plus)], products: [:])
    let user = "6f1c1a8e-8a4e-4f37-9a44-1d2b3c4d5e6f"

    /// RevenueCat's own example of GET /v1/subscribers (docs: openapi-spec/api-v1.yaml,
    /// components.examples.Subscriber), with a price, a billing issue and a refund added.
    static let documented: JSON = try! JSON.parse(
        Array(
            """
            {"request_date": "2019-07-26T17:40:10Z", "request_date_ms": 1564162810884,
             "subscriber": {
              "entitlements": {"pro_cat": {"expires_date": null, "grace_period_expires_date": null,
                                           "product_identifier": "onetime", "purchase_date": "2019-04-05T21:52:45Z"},
                               "plus": {"expires_date": "2019-08-14T21:07:40Z", "grace_period_expires_date": null,
                                        "product_identifier": "annual", "purchase_date": "2019-07-14T20:07:40Z"}},
              "first_seen": "2019-02-21T00:08:41Z", "management_url": "https://apps.apple.com/account/subscriptions",
              "non_subscriptions": {"onetime": [{"id": "cadba0c81b", "is_sandbox": true, "purchase_date": "2019-04-05T21:52:45Z",
                                                 "store": "app_store"}]},
              "original_app_user_id": "XXX-XXXXX-XXXXX-XX", "original_application_version": "1.0",
              "original_purchase_date": "2019-01-30T23:54:10Z", "other_purchases": {},
              "subscriptions": {
               "annual": {"auto_resume_date": null, "billing_issues_detected_at": null, "expires_date": "2019-08-14T21:07:40Z",
                          "grace_period_expires_date": null, "is_sandbox": true, "original_purchase_date": "2019-02-21T00:42:05Z",
                          "ownership_type": "PURCHASED", "period_type": "normal", "purchase_date": "2019-07-14T20:07:40Z",
                          "refunded_at": null, "store": "play_store", "store_transaction_id": "GPA.6801-7988-0152-76034..5",
                          "unsubscribe_detected_at": "2019-07-17T22:48:38Z", "price": {"amount": 39.99, "currency": "USD"}},
               "onemonth": {"auto_resume_date": null, "billing_issues_detected_at": "2019-06-17T22:47:55Z",
                            "expires_date": "2019-06-17T22:47:55Z", "grace_period_expires_date": "2019-06-30T22:47:55Z",
                            "is_sandbox": false, "original_purchase_date": "2019-05-17T22:47:55Z", "ownership_type": "FAMILY_SHARED",
                            "period_type": "trial", "purchase_date": "2019-05-17T22:47:55Z", "refunded_at": null,
                            "store": "app_store", "store_transaction_id": 1000000652379790, "unsubscribe_detected_at": null},
               "refunded.plus": {"billing_issues_detected_at": null, "expires_date": "2019-08-01T00:00:00Z", "is_sandbox": false,
                                 "ownership_type": "PURCHASED", "period_type": "normal", "purchase_date": "2019-07-01T00:00:00Z",
                                 "refunded_at": "2019-07-03T12:00:00Z", "store": "app_store", "unsubscribe_detected_at": null}}}}
            """.utf8))

    @Test func everyDocumentedFieldComesThrough() throws {
        let s = try RevenueCatSubscriber.decode(
            Self.documented, appUserId: user, tiers: tiers,
            catalog: ["onetime": .init(tier: .pro, cadence: .lifetime)])
        #expect(s.requestDate.millisecondsSinceEpoch == 1_564_162_810_884)
        let byProduct = Dictionary(uniqueKeysWithValues: s.pulled.map { ($0.event.productId ?? "", $0) })
        let annual = try #require(byProduct["annual"]).event
        #expect(annual.provider == .revenuecatPull && annual.kind == .subscriberState)
        #expect(annual.intrinsicAt == s.requestDate, "a state folds as of the request")
        #expect(annual.tier == .plus, "the entitlement naming the product decides")
        #expect(annual.environment == .sandbox && annual.platform == "play_store")
        #expect(annual.purchasedAt == Timestamp(iso8601: "2019-07-14T20:07:40Z"))
        #expect(annual.expiresAt == Timestamp(iso8601: "2019-08-14T21:07:40Z"))
        #expect(annual.willRenew == false, "unsubscribe_detected_at: auto-renew is off")
        #expect(annual.inBillingRetry == false && annual.priceMilli == 39_990 && annual.currency == "USD")
        #expect(annual.subscriptionId == "revenuecat:annual@play_store", "matched by product and store until a webhook names it")

        let month = try #require(byProduct["onemonth"]).event
        #expect(month.isTrial && month.periodType == "TRIAL" && month.familyShared)
        #expect(month.inBillingRetry == true && month.graceExpiresAt == Timestamp(iso8601: "2019-06-30T22:47:55Z"))
        #expect(month.willRenew == true && month.environment == .production)

        let refunded = try #require(byProduct["refunded.plus"])
        #expect(refunded.event.kind == .refund && refunded.stateDigest == nil)
        #expect(refunded.event.intrinsicAt == Timestamp(iso8601: "2019-07-03T12:00:00Z"), "a refund folds at its own time")

        let once = try #require(byProduct["onetime"]).event
        #expect(once.kind == .nonRenewingPurchase && once.tier == .pro && once.expiresAt == nil, "lifetime: no end")
        #expect(once.intrinsicAt == Timestamp(iso8601: "2019-04-05T21:52:45Z") && once.environment == .sandbox)
        #expect(once.providerEventId.hasSuffix(":purchase:cadba0c81b"))
        #expect(s.pulled.count == 4)
    }

    @Test func theSameStateHasTheSameDigestAndAnyChangeAnother() throws {
        let a = try RevenueCatSubscriber.decode(Self.documented, appUserId: user, tiers: tiers, catalog: [:])
        var root = try #require(Self.documented.objectValue)
        root["request_date_ms"] = .int(1_564_262_810_884)
        let later = JSON.object(root)
        let b = try RevenueCatSubscriber.decode(later, appUserId: user, tiers: tiers, catalog: [:])
        #expect(a.pulled.map(\.stateDigest) == b.pulled.map(\.stateDigest), "when it was asked is not what it states")
        var event = try #require(a.pulled.first { $0.stateDigest != nil }).event
        let digest = RevenueCatSubscriber.digest(event)
        event.willRenew?.toggle()
        #expect(RevenueCatSubscriber.digest(event) != digest)
    }

    /// Product ids are the answer's keys, of any length: what is stored fits its columns
    /// (bytes, cut on a character boundary), as a webhook's bounded fields do.
    @Test func longProductIdsAreCutToTheirColumnsOnACharacterBoundary() throws {
        let product = String(repeating: "é", count: 150) + "x"  // 301 bytes
        let info: JSON = [
            "request_date_ms": 1_564_162_810_884,
            "subscriber": [
                "subscriptions": [
                    product: [
                        "purchase_date": "2019-07-14T20:07:40Z",
                        "expires_date": "2019-08-14T21:07:40Z", "store": "app_store",
                    ]
                ],
                "non_subscriptions": [product: [["id": "abc", "purchase_date": "2019-04-05T21:52:45Z"]]],
            ],
        ]
        let s = try RevenueCatSubscriber.decode(info, appUserId: user, tiers: tiers, catalog: [:])
        for pulled in s.pulled {
            #expect((pulled.event.productId?.utf8.count ?? 0) <= 191 && (pulled.event.subscriptionId?.utf8.count ?? 0) <= 191)
            #expect(pulled.event.productId?.unicodeScalars.allSatisfy { $0 == "é" } == true)
        }
        #expect("aé".utf8Prefix(2) == "a" && "aé".utf8Prefix(3) == "aé" && "".utf8Prefix(0) == "")
    }

    @Test func anAnswerOfAnotherShapeIsAPayloadError() {
        for bad: JSON in [
            [:], ["request_date_ms": 1], ["request_date_ms": "x", "subscriber": [:]],
            ["request_date_ms": 1, "subscriber": ["subscriptions": ["p": ["purchase_date": "yesterday"]]]],
            ["request_date_ms": 1, "subscriber": ["subscriptions": ["p": "text"]]],
            ["request_date_ms": 1, "subscriber": ["non_subscriptions": ["p": [["purchase_date": "2019-04-05T21:52:45Z"]]]]],
        ] {
            #expect(throws: PayloadError.self, "\(bad)") {
                try RevenueCatSubscriber.decode(bad, appUserId: user, tiers: tiers, catalog: [:])
            }
        }
        #expect(
            (try? RevenueCatSubscriber.decode(
                ["request_date_ms": 1, "subscriber": [:]], appUserId: user, tiers: tiers,
                catalog: [:]))?.pulled.isEmpty == true, "an empty subscriber states nothing")
    }
}

@Suite struct PulledStateFoldTests {
    static let t0 = Timestamp(iso8601: "2026-06-01T00:00:00Z")!
    static func at(_ days: Int64) -> Timestamp { t0.adding(seconds: days * 86_400) }

    static func webhook(
        _ kind: EventKind, at day: Int64, purchase: Int64 = 0, expires: Int64 = 30, grace: Int64? = nil,
        id: String
    ) -> StoreEvent {
        StoreEvent(
            provider: .revenuecat, providerEventId: id, rawType: kind.rawValue.uppercased(), kind: kind, intrinsicAt: at(day),
            subscriptionId: "2000000111", productId: "app.plus.monthly", tier: .plus, platform: "app_store",
            purchasedAt: at(purchase), expiresAt: at(expires), graceExpiresAt: grace.map(at))
    }

    static func pulled(
        at day: Int64, purchase: Int64, expires: Int64, willRenew: Bool = true, billingIssue: Bool = false,
        grace: Int64? = nil, id: String = "pull"
    ) -> StoreEvent {
        StoreEvent(
            provider: .revenuecatPull, providerEventId: id, rawType: "SUBSCRIBER", kind: .subscriberState, intrinsicAt: at(day),
            subscriptionId: "revenuecat:app.plus.monthly@app_store", productId: "app.plus.monthly", tier: .plus,
            platform: "app_store", purchasedAt: at(purchase), expiresAt: at(expires), graceExpiresAt: grace.map(at),
            willRenew: willRenew, inBillingRetry: billingIssue)
    }

    @Test func aPulledRenewalHealsALostWebhookUnderTheWebhooksSubscription() {
        let events = [Self.webhook(.purchase, at: 0, id: "w1"), Self.pulled(at: 31, purchase: 30, expires: 60)]
        let p = StoreFold.fold(events, userId: "u")
        #expect(p.subscriptions.count == 1)
        let s = p.subscriptions[0]
        #expect(s.subscriptionId == "2000000111" && s.phase == .active && s.expiresAt == Self.at(60) && s.willRenew)
        #expect(s.grantsAccess(at: Self.at(45)))
    }

    @Test func anOlderWebhookCannotUndoAPulledStateAndALaterOneApplies() {
        let base = [Self.webhook(.purchase, at: 0, id: "w1"), Self.pulled(at: 31, purchase: 30, expires: 60)]
        let older = StoreFold.fold(base + [Self.webhook(.expiration, at: 30, expires: 30, id: "w2")], userId: "u")
        #expect(older.subscriptions[0].phase == .active && older.subscriptions[0].expiresAt == Self.at(60))
        let later = StoreFold.fold(base + [Self.webhook(.cancellation, at: 32, purchase: 30, expires: 60, id: "w3")], userId: "u")
        #expect(later.subscriptions[0].phase == .canceled && !later.subscriptions[0].willRenew)
    }

    @Test func billingIssueGraceExpiryAndRenewalIntentFromAPull() {
        let grace = StoreFold.fold([Self.pulled(at: 31, purchase: 0, expires: 30, billingIssue: true, grace: 36)], userId: "u")
        #expect(grace.subscriptions[0].phase == .grace && grace.subscriptions[0].grantsAccess(at: Self.at(33)))
        let retry = StoreFold.fold([Self.pulled(at: 31, purchase: 0, expires: 30, billingIssue: true)], userId: "u")
        #expect(retry.subscriptions[0].phase == .billingRetry && !retry.subscriptions[0].grantsAccess(at: Self.at(31)))
        let lapsed = StoreFold.fold([Self.pulled(at: 31, purchase: 0, expires: 30, willRenew: false)], userId: "u")
        #expect(lapsed.subscriptions[0].phase == .expired)
        let canceled = StoreFold.fold([Self.pulled(at: 10, purchase: 0, expires: 30, willRenew: false)], userId: "u")
        #expect(canceled.subscriptions[0].phase == .canceled && canceled.subscriptions[0].grantsAccess(at: Self.at(20)))
    }

    @Test func aPulledStateIsNeverAppendedIncrementally() {
        let folded = StoreFold.fold([Self.webhook(.purchase, at: 0, id: "w1")], userId: "u")
        #expect(StoreFold.appending(Self.pulled(at: 31, purchase: 30, expires: 60), to: folded) == nil)
        let unmatched = StoreFold.fold([Self.pulled(at: 31, purchase: 30, expires: 60)], userId: "u")
        #expect(unmatched.subscriptions[0].subscriptionId.hasPrefix(StoreFold.pulledKeyPrefix))
        #expect(
            StoreFold.appending(Self.webhook(.renewal, at: 61, purchase: 60, expires: 90, id: "w9"), to: unmatched) == nil,
            "a webhook may name the subscription of a pulled state folded under its own key")
    }
}
