import Testing

@testable import Core

/// Google Play through the fold (SPEC §18): every state read as the phase and access Play
/// gives, after every earlier state; a replaced token ended whatever the order its events
/// arrive in; a voided purchase against a later read; the push decoded strictly.
@Suite struct GooglePlayFoldTests {
    let tiers = TierResolver(rules: [("pro", .pro), ("plus", .plus)], products: [:])
    let now = Timestamp(iso8601: "2026-12-04T12:00:00Z")!

    func subscription(
        _ state: GooglePlaySubscription.State, expires: Timestamp?, product: String = "plus_monthly", autoRenew: Bool = true,
        phase: String = "basePrice", linked: String? = nil, start: Timestamp? = nil
    ) -> GooglePlaySubscription {
        GooglePlaySubscription(
            state: state,
            lineItems: [
                .init(
                    productId: product, basePlanId: "monthly", offerId: nil, expiryTime: expires, autoRenewEnabled: autoRenew,
                    offerPhase: phase, priceMilli: 4990, currency: "EUR")
            ],
            startTime: start ?? now.adding(milliseconds: -86_400_000), linkedPurchaseToken: linked, obfuscatedAccountId: "u",
            isTest: false, acknowledged: true, latestOrderId: nil, regionCode: nil, canceledBy: nil)
    }

    func read(_ s: GooglePlaySubscription, token: String = "token-a", at offset: Int64) -> StoreEvent {
        let at = now.adding(milliseconds: offset)
        return GooglePlayEvent.state(s, token: token, cause: "PULL", providerEventId: "e\(offset)-\(token)", readAt: at, tiers: tiers)
    }

    func fold(_ events: [StoreEvent]) -> StoreProjection { StoreFold.fold(events, userId: "u") }

    /// What each state means at `now`, with its expiry ahead or behind.
    func expected(_ state: GooglePlaySubscription.State, ahead: Bool, autoRenew: Bool) -> (AccessPhase?, Bool) {
        switch state {
        case .active: return (autoRenew ? .active : .canceled, ahead)
        case .canceled: return (.canceled, ahead)
        case .inGracePeriod: return ahead ? (.grace, true) : (.billingRetry, false)
        case .onHold: return (.billingRetry, false)
        case .paused, .expired: return (.expired, false)
        case .pending, .pendingPurchaseCanceled, .unspecified: return (nil, false)
        }
    }

    @Test func everyStateAfterEveryStateIsThePhaseAndAccessPlayGives() {
        let states = GooglePlaySubscription.State.allCases
        for before in [nil] + states.map(Optional.some) {
            for state in states {
                for ahead in [true, false] {
                    for autoRenew in [true, false] {
                        var events: [StoreEvent] = []
                        if let before { events.append(read(subscription(before, expires: now.adding(milliseconds: 86_400_000)), at: -60_000)) }
                        let expiry = now.adding(milliseconds: ahead ? 3_600_000 : -3_600_000)
                        events.append(read(subscription(state, expires: expiry, autoRenew: autoRenew), at: -1000))
                        let projection = fold(events)
                        let (phase, access) = expected(state, ahead: ahead, autoRenew: autoRenew)
                        let s = projection.subscriptions.first
                        let label = "\(before.map(\.rawValue) ?? "none") → \(state.rawValue) ahead=\(ahead) renew=\(autoRenew)"
                        if let phase {
                            #expect(s?.phase == phase, "\(label)")
                            #expect(s?.grantsAccess(at: now) == access, "\(label)")
                            #expect(s?.platform == "google_play" && s?.productId == "plus_monthly:monthly", "\(label)")
                        } else if let before, let prior = expected(before, ahead: true, autoRenew: true).0 {
                            #expect(s?.phase == prior, "\(label): a pending read changes nothing")
                        } else {
                            #expect(s == nil, "\(label): never paid, never a subscription")
                        }
                    }
                }
            }
        }
    }

    @Test func aFreeTrialIsATrialAndItsConversionAPaidPeriod() {
        let trial = read(subscription(.active, expires: now.adding(milliseconds: 86_400_000), phase: "freeTrial"), at: -2000)
        #expect(fold([trial]).subscriptions[0].phase == .trial)
        let paid = read(subscription(.active, expires: now.adding(milliseconds: 30 * 86_400_000)), at: -1000)
        let s = fold([paid, trial]).subscriptions[0]
        #expect(s.phase == .active && !s.inTrialPeriod && s.trialStartsAt != nil)
    }

    @Test func aReplacedTokenEndsWhenItsReplacementStartsInEveryArrivalOrder() {
        let upgradeAt = now.adding(milliseconds: -3_600_000)
        let old1 = read(subscription(.active, expires: now.adding(milliseconds: 20 * 86_400_000)), token: "old", at: -7_200_000)
        let old2 = read(
            subscription(.canceled, expires: now.adding(milliseconds: 20 * 86_400_000), autoRenew: false), token: "old", at: -60_000)
        let new = read(
            subscription(.active, expires: now.adding(milliseconds: 30 * 86_400_000), product: "pro_monthly", linked: "old", start: upgradeAt),
            token: "new", at: -30_000)
        let reference = fold([old1, old2, new])
        for order in permutations([old1, old2, new]) {
            #expect(fold(order) == reference)
        }
        let byId = Dictionary(uniqueKeysWithValues: reference.subscriptions.map { ($0.subscriptionId, $0) })
        let oldState = byId[GooglePlayEvent.subscriptionId(token: "old")]!
        let newState = byId[GooglePlayEvent.subscriptionId(token: "new")]!
        #expect(oldState.phase == .expired && oldState.expiresAt == upgradeAt && !oldState.grantsAccess(at: now))
        #expect(newState.phase == .active && newState.tier == .pro)
        #expect(reference.primary(at: now)?.subscriptionId == newState.subscriptionId)
        // Only the new token's events: nothing to end.
        #expect(fold([new]).subscriptions.count == 1)
    }

    @Test func aVoidedPurchaseStandsAgainstAReadOfTheSamePeriodNotAgainstANewOne() {
        let expiry = now.adding(milliseconds: 20 * 86_400_000)
        let bought = read(subscription(.active, expires: expiry), at: -7_200_000)
        let voided = StoreEvent(
            provider: .googlePlay, providerEventId: "void", rawType: "VOIDED_PURCHASE/FULL_REFUND", kind: .refund,
            intrinsicAt: now.adding(milliseconds: -3_600_000), subscriptionId: GooglePlayEvent.subscriptionId(token: "token-a"),
            platform: "google_play")
        let stale = read(subscription(.canceled, expires: expiry, autoRenew: false), at: -60_000)
        for order in permutations([bought, voided, stale]) {
            let s = fold(order).subscriptions[0]
            #expect(s.phase == .revoked && !s.grantsAccess(at: now))
        }
        let renewed = read(subscription(.active, expires: expiry.adding(milliseconds: 30 * 86_400_000)), at: -1000)
        #expect(fold([bought, voided, stale, renewed]).subscriptions[0].phase == .active)
    }

    @Test func theSameStateReadTwiceHasOneDigestAndAnotherStateAnother() {
        let a = read(subscription(.active, expires: now), at: -2000)
        let b = read(subscription(.active, expires: now), at: -1000)
        let c = read(subscription(.active, expires: now, autoRenew: false), at: -1000)
        #expect(GooglePlayEvent.digest(a) == GooglePlayEvent.digest(b))
        #expect(GooglePlayEvent.digest(a) != GooglePlayEvent.digest(c))
        #expect(a.subscriptionId == "gp:" + SHA256.hexHash(Array("token-a".utf8)))
        #expect(a.priceMilli == 4990 && a.currency == "EUR" && a.rawType == "PULL/ACTIVE")
    }

    // MARK: one-time products

    func productJSON(_ state: String, completed: String? = "2026-12-01T10:00:00.5Z", _ extra: JSONObject = [:]) -> JSON {
        var p: JSONObject = [
            "kind": "androidpublisher#productPurchaseV2",
            "productLineItem": [["productId": "week_pass_pro", "productOfferDetails": ["quantity": 1, "offerTags": []]]],
            "purchaseStateContext": ["purchaseState": .string(state)], "orderId": "GPA.1", "obfuscatedExternalAccountId": "u",
            "acknowledgementState": "ACKNOWLEDGEMENT_STATE_PENDING",
        ]
        if let completed { p["purchaseCompletionTime"] = .string(completed) }
        for (k, v) in extra { p[k] = v }
        return .object(p)
    }

    @Test func aOneTimeProductGrantsWhatTheCatalogSaysAndEveryStateIsRead() throws {
        let catalog: [String: BillingConfiguration.Product] = [
            "week_pass_pro": .init(tier: .pro, cadence: .nonRenewing, duration: CatalogDuration("P1W")),
            "lifetime_plus": .init(tier: .plus, cadence: .lifetime),
        ]
        let bought = try GooglePlayProductPurchase.decode(productJSON("PURCHASED", ["testPurchaseContext": ["fopType": "TEST"]]))
        #expect(bought.state == .purchased && bought.productIds == ["week_pass_pro"] && bought.isTest && !bought.acknowledged)
        let read = GooglePlayRead(bought)
        #expect(read.kind == .product && read.isAcknowledgeable && read.productId == "week_pass_pro" && read.isOf("week_pass_pro"))
        let event = read.event(token: "t", cause: "PULL", providerEventId: "e", readAt: now, tiers: tiers, catalog: catalog)
        let completed = Timestamp(iso8601: "2026-12-01T10:00:00.500Z")!
        #expect(event.kind == .nonRenewingPurchase && event.environment == .sandbox && event.tier == .pro)
        #expect(event.expiresAt == completed.adding(milliseconds: 7 * 86_400_000))
        let s = fold([event]).subscriptions[0]
        #expect(s.grantsAccess(at: now) && !s.grantsAccess(at: completed.adding(milliseconds: 7 * 86_400_000)))
        var lifetime = bought
        lifetime.productIds = ["lifetime_plus"]
        let forever = GooglePlayRead(lifetime).event(token: "t", cause: "PULL", providerEventId: "e", readAt: now, tiers: tiers, catalog: catalog)
        #expect(forever.expiresAt == nil && fold([forever]).subscriptions[0].grantsAccess(at: Timestamp(iso8601: "2099-01-01T00:00:00Z")!))
        let canceled = GooglePlayRead(try GooglePlayProductPurchase.decode(productJSON("CANCELLED", completed: nil)))
        let refund = canceled.event(
            token: "t", cause: "PULL", providerEventId: "r", readAt: now.adding(milliseconds: 1), tiers: tiers, catalog: catalog)
        #expect(refund.kind == .refund && !canceled.isAcknowledgeable)
        #expect(fold([event, refund]).subscriptions[0].phase == .revoked)
        let pending = GooglePlayRead(try GooglePlayProductPurchase.decode(productJSON("PENDING", completed: nil)))
        #expect(pending.event(token: "t", cause: "PULL", providerEventId: "p", readAt: now, tiers: tiers, catalog: catalog).kind == .unknown)
        for bad in [
            productJSON("REFUNDED"), productJSON("PURCHASED", ["purchaseStateContext": "x"]), productJSON("PURCHASED", completed: "yesterday"),
            productJSON("PURCHASED", ["productLineItem": [["quantity": 1]]]), productJSON("PURCHASED", ["purchaseStateContext": .null]),
        ] {
            #expect(throws: PayloadError.self, "\(bad)") { try GooglePlayProductPurchase.decode(bad) }
        }
    }

    @Test func aVoidedPurchaseListedIsTheSameEventAsItsPushAndDecodesStrictly() throws {
        let entry: JSON = [
            "kind": "androidpublisher#voidedPurchase", "purchaseToken": "token-a", "orderId": "GPA.3312-4455-6677-88990",
            "purchaseTimeMillis": "1733227200000", "voidedTimeMillis": "1733313600000", "voidedSource": 2, "voidedReason": 7,
        ]
        let listed = try GooglePlayVoidedPurchase.decode(entry, path: "voidedPurchases[0]")
        #expect(listed.voidedAt == Timestamp(millisecondsSinceEpoch: 1_733_313_600_000) && listed.reason == "chargeback")
        #expect(listed.payload.objectValue?["purchaseToken"] == nil, "the inbox never keeps the token")
        let fromList = GooglePlayEvent.voided(
            token: listed.purchaseToken, orderId: listed.orderId, at: listed.voidedAt, reason: listed.reason, rawType: "VOIDED_PURCHASES_API")
        let fromPush = GooglePlayEvent.voided(
            token: "token-a", orderId: "GPA.3312-4455-6677-88990", at: now, reason: nil, rawType: "VOIDED_PURCHASE/FULL_REFUND")
        #expect(fromList.providerEventId == fromPush.providerEventId && fromList.kind == .refund)
        #expect(fromList.subscriptionId == GooglePlayEvent.subscriptionId(token: "token-a"))
        let another = GooglePlayEvent.voided(token: "token-a", orderId: "GPA.3312-4455-6677-88990..1", at: now, reason: nil, rawType: "x")
        #expect(another.providerEventId != fromPush.providerEventId, "another order of the token is another void")
        #expect(
            try GooglePlayVoidedPurchase.decode(["purchaseToken": "t", "voidedTimeMillis": "1", "voidedReason": 42], path: "v").reason == "other")
        for bad: JSON in [
            ["voidedTimeMillis": "1"], ["purchaseToken": "", "voidedTimeMillis": "1"], ["purchaseToken": "t"],
            ["purchaseToken": "t", "voidedTimeMillis": "soon"], ["purchaseToken": "t", "voidedTimeMillis": "-5"],
            ["purchaseToken": "t", "voidedTimeMillis": "1", "voidedReason": "remorse"], ["purchaseToken": 7, "voidedTimeMillis": "1"],
        ] {
            #expect(throws: PayloadError.self, "\(bad)") { try GooglePlayVoidedPurchase.decode(bad, path: "v") }
        }
        // A void of the period a later read still shows stands; a new paid period ends it.
        let bought = read(subscription(.active, expires: now.adding(milliseconds: 20 * 86_400_000)), at: 0)
        let voided = GooglePlayEvent.voided(token: "token-a", orderId: "o", at: now.adding(milliseconds: 10), reason: nil, rawType: "x")
        let stale = read(subscription(.active, expires: now.adding(milliseconds: 20 * 86_400_000)), at: 20)
        #expect(fold([bought, voided, stale]).subscriptions[0].phase == .revoked)
        let renewed = read(subscription(.active, expires: now.adding(milliseconds: 50 * 86_400_000)), at: 30)
        #expect(fold([bought, voided, stale, renewed]).subscriptions[0].phase == .active)
    }

    // MARK: the push

    func push(_ notification: JSONObject, messageId: JSON = "136969346945", eventTime: JSON = "1733313600000") -> JSON {
        var developer: JSONObject = ["version": "1.0", "packageName": "com.example.app", "eventTimeMillis": eventTime]
        for (k, v) in notification { developer[k] = v }
        let data = Base64.encode(JSON.object(developer).serialized())
        return [
            "message": ["data": .string(data), "messageId": messageId, "publishTime": "2024-12-04T12:00:00Z"],
            "subscription": "projects/p/subscriptions/s",
        ]
    }

    @Test func aPushDecodesEveryKindOfNotification() throws {
        let sub = try GooglePlayPush.decode(push(["subscriptionNotification": ["version": "1.0", "notificationType": 4, "purchaseToken": "t"]]))
        #expect(sub.notification == .subscription(type: "SUBSCRIPTION_PURCHASED", purchaseToken: "t"))
        #expect(sub.messageId == "136969346945" && sub.packageName == "com.example.app")
        #expect(sub.eventTime == Timestamp(millisecondsSinceEpoch: 1_733_313_600_000))
        let asString = try GooglePlayPush.decode(
            push(["subscriptionNotification": ["notificationType": "13", "purchaseToken": "t"]], eventTime: 1_733_313_600_000))
        #expect(asString.notification == .subscription(type: "SUBSCRIPTION_EXPIRED", purchaseToken: "t"))
        let future = try GooglePlayPush.decode(push(["subscriptionNotification": ["notificationType": 99, "purchaseToken": "t"]]))
        #expect(future.notification == .subscription(type: "SUBSCRIPTION_TYPE_99", purchaseToken: "t"))
        let voided = try GooglePlayPush.decode(
            push(["voidedPurchaseNotification": ["purchaseToken": "t", "orderId": "GPA.1", "productType": 1, "refundType": 2]]))
        #expect(voided.notification == .voided(purchaseToken: "t", orderId: "GPA.1", productType: 1, refundType: 2))
        let oneTime = try GooglePlayPush.decode(push(["oneTimeProductNotification": ["notificationType": 1, "purchaseToken": "t", "sku": "coins"]]))
        #expect(oneTime.notification == .oneTimeProduct(type: 1, purchaseToken: "t", sku: "coins"))
        #expect(try GooglePlayPush.decode(push(["testNotification": ["version": "1.0"]])).notification == .test)
        let review = try GooglePlayPush.decode(push(["pendingRefundReviewNotification": ["x": 1]]))
        #expect(review.notification == .other("pendingRefundReviewNotification"))
    }

    @Test func aPushThatIsNotOneIsRefused() {
        let token: JSONObject = ["subscriptionNotification": ["notificationType": 4, "purchaseToken": "t"]]
        let bad: [JSON] = [
            [:], ["message": "x"], push(token, messageId: 7), push(token, messageId: ""),
            ["message": ["data": "not base64!", "messageId": "1"]],
            ["message": ["data": .string(Base64.encode(Array("[1]".utf8))), "messageId": "1"]],
            push(["subscriptionNotification": ["notificationType": "four", "purchaseToken": "t"]]),
            push(["subscriptionNotification": ["notificationType": 4, "purchaseToken": ""]]),
            push(["subscriptionNotification": ["notificationType": 4]]), push(token, eventTime: "-5"),
        ]
        for body in bad {
            #expect(throws: PayloadError.self, "\(body)") { try GooglePlayPush.decode(body) }
        }
    }

    @Test func googlesMoneyIsReadInThousandthsRoundedOnce() throws {
        for (units, nanos, milli) in [("4", 990_000_000, Int64(4990)), ("0", 500_000, 1), ("12", 0, 12_000), ("-1", -250_000_000, -1250)] {
            let json: JSON = [
                "subscriptionState": "SUBSCRIPTION_STATE_ACTIVE",
                "lineItems": [
                    [
                        "productId": "p", "expiryTime": "2026-12-31T10:00:00Z",
                        "autoRenewingPlan": ["recurringPrice": ["currencyCode": "JPY", "units": .string(units), "nanos": .int(Int64(nanos))]],
                    ]
                ],
            ]
            let item = try GooglePlaySubscription.decode(json).lineItems[0]
            #expect(item.priceMilli == milli && item.currency == "JPY", "\(units) \(nanos)")
        }
    }

    /// The order a state names (`transactionId`, its paid period): the line item's latest
    /// successful order in every state; the deprecated latest order only in a settled state,
    /// never where a charge is failing or pending (it may be the declined renewal).
    @Test func theOrderOfAStateIsItsLatestSuccessfulOneAndAFailingChargeNamesNone() {
        for state in GooglePlaySubscription.State.allCases {
            var s = subscription(state, expires: now.adding(milliseconds: 86_400_000))
            s.latestOrderId = "GPA.1-2-3-4..1"
            #expect(read(s, at: 0).transactionId == ([.active, .canceled, .expired].contains(state) ? "GPA.1-2-3-4..1" : nil), "\(state)")
            s.lineItems[0].latestSuccessfulOrderId = "GPA.1-2-3-4..0"
            #expect(read(s, at: 0).transactionId == "GPA.1-2-3-4..0", "\(state)")
        }
    }
}
