import Testing

@testable import Core

/// Day-granular instants keep the scenarios readable: day(0) is 2026-01-01.
private func day(_ n: Int64, hour: Int64 = 0) -> Timestamp {
    Timestamp(CivilDateTime(year: 2026, month: 1, day: 1)).adding(seconds: n * 86_400 + hour * 3600)
}

private func ev(
    _ kind: EventKind, at: Int64, sub: String = "sub-1", product: String? = "plus.monthly",
    tier: Tier? = .plus, expires: Int64? = nil, trial: Bool = false, grace: Int64? = nil,
    newProduct: String? = nil, newTier: Tier? = nil, id: String? = nil,
    from: [String] = [], to: [String] = []
) -> StoreEvent {
    StoreEvent(
        provider: .revenuecat, providerEventId: id ?? "\(kind.rawValue)-\(at)-\(sub)", rawType: kind.rawValue.uppercased(),
        kind: kind, intrinsicAt: day(at), subscriptionId: sub, productId: product, tier: tier,
        periodType: trial ? "TRIAL" : "NORMAL", isTrial: trial, environment: .production, platform: "app_store",
        purchasedAt: day(at), expiresAt: expires.map { day($0) }, graceExpiresAt: grace.map { day($0) },
        newProductId: newProduct, newTier: newTier, transferredFrom: from, transferredTo: to)
}

private func resolve(_ events: [StoreEvent], user: String = "u1", at now: Int64) -> (tier: Tier, phase: AccessPhase, sub: SubscriptionState?) {
    let projection = StoreFold.fold(events, userId: user)
    let primary = projection.primary(at: day(now))
    let granting = primary?.grantsAccess(at: day(now)) ?? false
    return (granting ? primary!.tier! : .free, primary?.phase(at: day(now)) ?? .none, primary)
}

@Suite struct StoreFoldTests {
    @Test func purchaseGivesTierUntilExpiryThenReadsExpired() {
        let events = [ev(.purchase, at: 0, expires: 30)]
        #expect(resolve(events, at: 10).tier == .plus)
        #expect(resolve(events, at: 10).phase == .active)
        #expect(resolve(events, at: 10).sub?.willRenew == true)
        // No EXPIRATION ever arrived: still free after expiry, read time decides.
        #expect(resolve(events, at: 31).tier == .free)
        #expect(resolve(events, at: 31).phase == .expired)
    }

    @Test func trialThenConversion() {
        let trial = ev(.purchase, at: 0, expires: 7, trial: true)
        var r = resolve([trial], at: 3)
        #expect(r.tier == .plus && r.phase == .trial)
        #expect(r.sub?.trialStartsAt == day(0) && r.sub?.trialEndsAt == day(7))
        let conversion = ev(.renewal, at: 7, expires: 37)
        r = resolve([conversion, trial], at: 10)
        #expect(r.tier == .plus && r.phase == .active)
        #expect(r.sub?.inTrialPeriod == false)
        #expect(r.sub?.expiresAt == day(37))
    }

    @Test func cancelThenUncancel() {
        let events = [ev(.purchase, at: 0, expires: 30), ev(.cancellation, at: 5, expires: 30), ev(.uncancellation, at: 6, expires: 30)]
        let r = resolve(events, at: 10)
        #expect(r.phase == .active && r.tier == .plus && r.sub?.willRenew == true)
        let canceled = resolve(Array(events.prefix(2)), at: 10)
        #expect(canceled.phase == .canceled && canceled.tier == .plus && canceled.sub?.willRenew == false)
    }

    @Test func cancelKeepsAccessUntilExpiryThenExpires() {
        let events = [ev(.purchase, at: 0, expires: 30), ev(.cancellation, at: 5, expires: 30)]
        #expect(resolve(events, at: 29).tier == .plus)
        #expect(resolve(events, at: 30).tier == .free)
        #expect(resolve(events, at: 30).phase == .expired)
        let withExpiration = events + [ev(.expiration, at: 30, expires: 30)]
        #expect(resolve(withExpiration, at: 31).phase == .expired)
    }

    @Test func canceledTrialKeepsTrialAccess() {
        let events = [ev(.purchase, at: 0, expires: 7, trial: true), ev(.cancellation, at: 1, expires: 7)]
        let r = resolve(events, at: 2)
        #expect(r.tier == .plus && r.phase == .canceled)
        #expect(r.sub?.inTrialPeriod == true)
    }

    @Test func refundEndsAccessNow() {
        let events = [ev(.purchase, at: 0, expires: 30), ev(.refund, at: 10, expires: 30)]
        let r = resolve(events, at: 11)
        #expect(r.tier == .free && r.phase == .revoked)
        #expect(r.sub?.expiresAt == day(10))
        let reversed = resolve(events + [ev(.refundReversed, at: 12)], at: 13)
        #expect(reversed.tier == .plus && reversed.phase == .active && reversed.sub?.expiresAt == day(30))
    }

    @Test func billingIssueWithGraceKeepsAccessUntilGraceEndsThenRecovers() {
        let events = [ev(.purchase, at: 0, expires: 30), ev(.billingIssue, at: 30, expires: 30, grace: 36)]
        #expect(resolve(events, at: 32).tier == .plus)
        #expect(resolve(events, at: 32).phase == .grace)
        #expect(resolve(events, at: 32).sub?.graceExpiresAt == day(36))
        #expect(resolve(events, at: 37).phase == .expired)
        let recovered = events + [ev(.renewal, at: 33, expires: 63)]
        #expect(resolve(recovered, at: 34).phase == .active)
        #expect(resolve(recovered, at: 34).sub?.graceExpiresAt == nil)
    }

    @Test func billingIssueWithoutGraceIsBillingRetryWithoutAccess() {
        let events = [ev(.purchase, at: 0, expires: 30), ev(.billingIssue, at: 30, expires: 30)]
        let r = resolve(events, at: 31)
        #expect(r.tier == .free && r.phase == .billingRetry)
        let recovered = resolve(events + [ev(.renewal, at: 35, expires: 65)], at: 36)
        #expect(recovered.tier == .plus && recovered.phase == .active)
    }

    @Test func upgradeUnlocksOnlyWithItsConfirmingRenewal() {
        let purchase = ev(.purchase, at: 0, expires: 30)
        let change = ev(.productChange, at: 10, expires: 30, newProduct: "pro.monthly", newTier: .pro)
        var r = resolve([purchase, change], at: 10)
        #expect(r.tier == .plus, "PRODUCT_CHANGE alone changes nothing")
        #expect(r.sub?.pendingChange == PendingChange(productId: "pro.monthly", tier: .pro, effectiveAt: day(30)))
        let confirm = ev(.renewal, at: 10, product: "pro.monthly", tier: .pro, expires: 40, id: "zz-confirm")
        r = resolve([confirm, change, purchase], at: 11)
        #expect(r.tier == .pro && r.sub?.pendingChange == nil && r.sub?.productId == "pro.monthly")
    }

    @Test func downgradeKeepsHigherTierUntilPeriodEnd() {
        let purchase = ev(.purchase, at: 0, product: "pro.monthly", tier: .pro, expires: 30)
        let change = ev(.productChange, at: 5, product: "pro.monthly", tier: .pro, expires: 30, newProduct: "plus.monthly", newTier: .plus)
        var r = resolve([purchase, change], at: 20)
        #expect(r.tier == .pro && r.sub?.pendingChange?.tier == .plus && r.sub?.pendingChange?.effectiveAt == day(30))
        let renewal = ev(.renewal, at: 30, product: "plus.monthly", tier: .plus, expires: 60)
        r = resolve([renewal, change, purchase], at: 31)
        #expect(r.tier == .plus && r.sub?.pendingChange == nil)
    }

    @Test func productChangeBackToCurrentProductClearsPending() {
        let events = [
            ev(.purchase, at: 0, expires: 30),
            ev(.productChange, at: 5, expires: 30, newProduct: "pro.monthly", newTier: .pro),
            ev(.productChange, at: 6, expires: 30, newProduct: "plus.monthly", newTier: .plus),
        ]
        #expect(resolve(events, at: 7).sub?.pendingChange == nil)
    }

    @Test func transferStandsTheSenderDown() {
        let events = [ev(.purchase, at: 0, expires: 30), ev(.transfer, at: 5, sub: "", product: nil, tier: nil, from: ["u1"], to: ["u2"])]
        #expect(resolve(events, user: "u1", at: 6).tier == .free)
        #expect(resolve(events, user: "u1", at: 6).sub == nil)
        // The receiver's fold gets the sender's earlier events spliced in by the caller.
        #expect(resolve(events, user: "u2", at: 6).tier == .plus)
    }

    @Test func otherEventTypes() {
        let base = ev(.purchase, at: 0, expires: 30)
        #expect(resolve([base, ev(.extension, at: 10, expires: 45)], at: 40).tier == .plus)
        #expect(resolve([base, ev(.pause, at: 10, expires: 30)], at: 11).sub?.willRenew == false)
        let nonRenewing = ev(.nonRenewingPurchase, at: 0, sub: "nr", product: "pro.lifetime", tier: .pro, expires: nil)
        #expect(resolve([nonRenewing], at: 9999).tier == .pro)
        #expect(resolve([nonRenewing], at: 9999).sub?.willRenew == false)
        let temporary = ev(.temporaryGrant, at: 0, sub: "tmp", expires: 1)
        #expect(resolve([temporary], at: 0).tier == .plus)
        #expect(resolve([temporary], at: 2).tier == .free)
        let promo = ev(.promotional, at: 0, sub: "", product: "rc_promo_pro", tier: .pro, expires: 10)
        #expect(resolve([promo], at: 5).tier == .pro)
    }

    @Test func testAndUnknownAndUntimedEventsAreNeverApplied() {
        let base = ev(.purchase, at: 0, expires: 30)
        var untimedExpiration = ev(.expiration, at: 5)
        untimedExpiration.intrinsicAt = nil
        let projection = StoreFold.fold([base, ev(.test, at: 1), ev(.unknown, at: 2), untimedExpiration], userId: "u1")
        #expect(projection.appliedEvents == 1)
        #expect(resolve([base, untimedExpiration], at: 10).tier == .plus)
    }

    @Test func highestActiveSubscriptionWins() {
        let plus = ev(.purchase, at: 0, sub: "a", expires: 60)
        let pro = ev(.purchase, at: 1, sub: "b", product: "pro.monthly", tier: .pro, expires: 30, trial: true)
        #expect(resolve([plus, pro], at: 10).tier == .pro)
        #expect(resolve([plus, pro], at: 10).phase == .trial)
        #expect(resolve([plus, pro], at: 40).tier == .plus, "when the pro trial lapses, plus shows again")
    }

    @Test func lateRenewalAfterExpirationStillFoldsInOrder() {
        // Arrival: expiration first, then the earlier renewal. Sorted fold: renewal, then expiration.
        let renewal = ev(.renewal, at: 30, expires: 60)
        let expiration = ev(.expiration, at: 61, expires: 60)
        #expect(resolve([expiration, renewal], at: 62).phase == .expired)
        #expect(resolve([expiration, renewal], at: 45).tier == .free, "expired by the later expiration event")
    }

    @Test func everyArrivalOrderGivesTheSameProjection() {
        let events = [
            ev(.purchase, at: 0, expires: 7, trial: true),
            ev(.renewal, at: 7, expires: 37),
            ev(.productChange, at: 10, expires: 37, newProduct: "pro.monthly", newTier: .pro),
            ev(.cancellation, at: 12, expires: 37),
            ev(.uncancellation, at: 13, expires: 37),
            ev(.billingIssue, at: 37, expires: 37, grace: 40),
            ev(.renewal, at: 38, product: "pro.monthly", tier: .pro, expires: 68),
        ]
        let expected = StoreFold.fold(events, userId: "u1")
        var checked = 0
        forEachPermutation(events) { order in
            #expect(StoreFold.fold(order, userId: "u1") == expected)
            checked += 1
        }
        #expect(checked == 5040)
        #expect(expected.primary(at: day(39))?.tier == .pro)
    }

    @Test func sameMillisecondTiesBreakByEventId() {
        let a = ev(.cancellation, at: 5, expires: 30, id: "a")
        let b = ev(.uncancellation, at: 5, expires: 30, id: "b")
        let base = ev(.purchase, at: 0, expires: 30)
        #expect(StoreFold.fold([base, b, a], userId: "u") == StoreFold.fold([a, base, b], userId: "u"))
        #expect(resolve([b, a, base], at: 6).phase == .active, "a (cancel) then b (uncancel)")
    }
}

private func forEachPermutation<T>(_ items: [T], _ body: ([T]) -> Void) {
    var items = items
    func permute(_ k: Int) {
        if k == items.count {
            body(items)
            return
        }
        for i in k..<items.count {
            items.swapAt(k, i)
            permute(k + 1)
            items.swapAt(k, i)
        }
    }
    permute(0)
}

@Suite struct StoreFoldSourcePrecedenceTests {
    private func at(_ day: Int64) -> Timestamp { Timestamp(CivilDateTime(year: 2026, month: 1, day: 1)).adding(seconds: day * 86_400) }

    private func event(
        _ provider: EventProvider, _ kind: EventKind, id: String, at t: Int64, expires: Int64, purchased: Int64? = nil,
        tier: Tier = .plus
    ) -> StoreEvent {
        StoreEvent(
            provider: provider, providerEventId: id, rawType: kind.rawValue, kind: kind, intrinsicAt: at(t),
            subscriptionId: "otid-1", productId: "p", tier: tier, environment: .production, platform: "app_store",
            purchasedAt: at(purchased ?? t), expiresAt: at(expires))
    }

    @Test func appStoreWinsOverRevenueCatForTheSameSubscription() {
        // RevenueCat says expired at day 20 (a later, relayed view); Apple says renewed to day 60.
        let events = [
            event(.appleNotification, .purchase, id: "a1", at: 0, expires: 30),
            event(.appleNotification, .renewal, id: "a2", at: 29, expires: 60),
            event(.revenuecat, .expiration, id: "r1", at: 40, expires: 20),
        ]
        for order in [events, events.reversed(), [events[2], events[0], events[1]]] {
            let projection = StoreFold.fold(order, userId: "u")
            #expect(projection.subscriptions.count == 1)
            #expect(projection.subscriptions[0].expiresAt == at(60))
            #expect(projection.subscriptions[0].provider == .appleNotification)
            #expect(projection.appliedEvents == 2)
        }
    }

    @Test func revenueCatAloneStillCounts() {
        let projection = StoreFold.fold([event(.revenuecat, .purchase, id: "r1", at: 0, expires: 30)], userId: "u")
        #expect(projection.primary(at: at(1))?.grantsAccess(at: at(1)) == true)
    }

    @Test func olderAppStorePeriodSignedLaterDoesNotRollBack() {
        // A restore re-posts the first period's transaction, freshly signed, after the renewal.
        let events = [
            event(.appleNotification, .renewal, id: "n-renew", at: 29, expires: 60, purchased: 29),
            event(.appleTransaction, .purchase, id: "t-first", at: 45, expires: 30, purchased: 0),
        ]
        let projection = StoreFold.fold(events, userId: "u")
        #expect(projection.subscriptions[0].expiresAt == at(60))
    }
}

@Suite struct IncrementalFoldTests {
    /// Whenever `appending` agrees to fold incrementally, the result is exactly the full fold
    /// of the longer history; it refuses late events, transfers and new keys in a history.
    @Test func appendingEqualsTheFullFoldWheneverItApplies() {
        let history = [
            ev(.purchase, at: 0, expires: 7, trial: true),
            ev(.renewal, at: 7, expires: 37),
            ev(.productChange, at: 10, expires: 37, newProduct: "pro.monthly", newTier: .pro),
            ev(.cancellation, at: 12, expires: 37),
            ev(.uncancellation, at: 13, expires: 37),
            ev(.billingIssue, at: 37, expires: 37, grace: 40),
            ev(.renewal, at: 38, product: "pro.monthly", tier: .pro, expires: 68),
            ev(.refund, at: 50, product: "pro.monthly", tier: .pro, expires: 68),
        ]
        var projection = StoreProjection.empty
        var incremental = 0
        for (index, event) in history.enumerated() {
            let full = StoreFold.fold(Array(history[...index]), userId: "u1")
            if let appended = StoreFold.appending(event, to: projection) {
                #expect(appended == full, "event \(index)")
                incremental += 1
            }
            projection = full
        }
        #expect(incremental == history.count, "an in-order single-subscription history is always incremental")
        #expect(StoreFold.appending(ev(.renewal, at: 20, expires: 50), to: projection) == nil, "a late event re-folds")
        #expect(StoreFold.appending(ev(.renewal, at: 50, expires: 80), to: projection) == nil, "the same instant re-folds")
        #expect(StoreFold.appending(ev(.transfer, at: 60, sub: "", product: nil, tier: nil, from: ["u1"]), to: projection) == nil)
        #expect(StoreFold.appending(ev(.purchase, at: 60, sub: "other", expires: 90), to: projection) == nil, "a new key re-folds")
        var apple = ev(.renewal, at: 60, product: "pro.monthly", tier: .pro, expires: 90)
        apple.provider = .appleNotification
        #expect(StoreFold.appending(apple, to: projection) == nil, "a provider switch re-folds")
        #expect(StoreFold.appending(ev(.test, at: 60), to: projection) == nil)
    }
}
