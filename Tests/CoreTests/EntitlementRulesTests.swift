import Foundation
import Testing

@testable import Core

// The entitlement rules of SPEC §5–6 as the stores really exercise them, each proved over
// every combination it covers: providers, arrival orders, intrinsic orders and ties.

private func day(_ n: Int64, hour: Int64 = 0) -> Timestamp {
    Timestamp(CivilDateTime(year: 2026, month: 1, day: 1)).adding(seconds: n * 86_400 + hour * 3600)
}

/// An event as either provider delivers it: RevenueCat (relayed) or the App Store (signed).
private func event(
    _ provider: EventProvider, _ kind: EventKind, id: String, at: Timestamp, purchased: Int64,
    expires: Int64?, sub: String = "otid-1", product: String = "plus.monthly", tier: Tier = .plus,
    trial: Bool = false, grace: Timestamp? = nil, inBillingRetry: Bool? = nil, willRenew: Bool? = nil,
    newProduct: String? = nil, cancelReason: String? = nil
) -> StoreEvent {
    StoreEvent(
        provider: provider, providerEventId: id, rawType: kind.rawValue.uppercased(), kind: kind, intrinsicAt: at,
        subscriptionId: sub, productId: product, tier: tier, periodType: trial ? "TRIAL" : "NORMAL", isTrial: trial,
        environment: .production, platform: "app_store", purchasedAt: day(purchased), expiresAt: expires.map { day($0) },
        graceExpiresAt: grace, cancelReason: cancelReason, newProductId: newProduct,
        newTier: newProduct.map { $0.contains("pro") ? .pro : .plus }, effectiveAt: expires.map { day($0) },
        willRenew: willRenew, inBillingRetry: inBillingRetry)
}

/// Every ordering of `items` (small inputs only).
func permutations<T>(_ items: [T]) -> [[T]] {
    guard items.count > 1 else { return [items] }
    var result: [[T]] = []
    for (i, item) in items.enumerated() {
        var rest = items
        rest.remove(at: i)
        for tail in permutations(rest) { result.append([item] + tail) }
    }
    return result
}

/// What the snapshot would say of the store at `now`.
private func judge(_ events: [StoreEvent], at now: Timestamp) -> (tier: Tier, phase: AccessPhase, state: SubscriptionState?) {
    let projection = StoreFold.fold(events, userId: "u1")
    let primary = projection.primary(at: now)
    let granting = primary?.grantsAccess(at: now) ?? false
    return (granting ? primary!.tier! : .free, primary?.phase(at: now) ?? .none, primary)
}

/// Every arrival order of `events` folds to one projection; returns it.
private func foldEveryOrder(_ events: [StoreEvent], sourceLocation: SourceLocation = #_sourceLocation) -> StoreProjection {
    let expected = StoreFold.fold(events, userId: "u1")
    for order in permutations(events) {
        #expect(StoreFold.fold(order, userId: "u1") == expected, sourceLocation: sourceLocation)
    }
    return expected
}

@Suite struct BillingErrorRuleTests {
    /// RevenueCat: BILLING_ISSUE (with or without grace) and CANCELLATION/BILLING_ERROR for
    /// one failed renewal, the notice before, at the same instant as (both id orders), and
    /// after the billing issue, every arrival order: grace keeps access until its end,
    /// without grace the store retries without access, and RENEWAL recovers.
    @Test func revenueCatBillingErrorNeverEndsGraceInAnyOrder() {
        let purchase = event(.revenuecat, .purchase, id: "p", at: day(0), purchased: 0, expires: 30)
        let issueAt = day(30, hour: 1)
        for withGrace in [true, false] {
            for (offset, idOfNotice) in [(-1, "c"), (0, "a"), (0, "z"), (1, "c")] {
                let issue = event(
                    .revenuecat, .billingIssue, id: "m", at: issueAt, purchased: 0, expires: 30,
                    grace: withGrace ? day(46) : nil)
                let notice = event(
                    .revenuecat, .billingIssue, id: idOfNotice, at: issueAt.adding(seconds: Int64(offset) * 60),
                    purchased: 0, expires: 30, cancelReason: "BILLING_ERROR")
                let projection = foldEveryOrder([purchase, issue, notice])
                let during = judge([purchase, issue, notice], at: day(40))
                if withGrace {
                    #expect(during.tier == .plus && during.phase == .grace, "offset \(offset) id \(idOfNotice)")
                    #expect(during.state?.graceExpiresAt == day(46))
                    #expect(judge([purchase, issue, notice], at: day(47)).tier == .free)
                } else {
                    #expect(during.tier == .free && during.phase == .billingRetry, "offset \(offset) id \(idOfNotice)")
                }
                #expect(projection.subscriptions.count == 1)
                let recovery = event(.revenuecat, .renewal, id: "r", at: day(41), purchased: 41, expires: 71)
                let recovered = judge([notice, recovery, issue, purchase], at: day(42))
                #expect(recovered.tier == .plus && recovered.phase == .active && recovered.state?.graceExpiresAt == nil)
            }
        }
    }

    /// App Store: DID_FAIL_TO_RENEW with and without GRACE_PERIOD, GRACE_PERIOD_EXPIRED,
    /// BILLING_RECOVERY, each carrying renewal info as Apple signs it.
    @Test func appStoreFailedRenewalGraceAndRecovery() {
        let purchase = event(.appleNotification, .purchase, id: "n1", at: day(0), purchased: 0, expires: 30)
        let failGrace = event(
            .appleNotification, .billingIssue, id: "n2", at: day(30, hour: 1), purchased: 0, expires: 30,
            grace: day(46), inBillingRetry: true, willRenew: true)
        let failRetry = event(
            .appleNotification, .billingIssue, id: "n2", at: day(30, hour: 1), purchased: 0, expires: 30,
            inBillingRetry: true, willRenew: true)
        let graceExpired = event(
            .appleNotification, .billingIssue, id: "n3", at: day(46, hour: 1), purchased: 0, expires: 30,
            grace: day(46), inBillingRetry: true, willRenew: true)
        let recovery = event(
            .appleNotification, .renewal, id: "n4", at: day(50), purchased: 50, expires: 80,
            inBillingRetry: false, willRenew: true)
        _ = foldEveryOrder([purchase, failGrace, graceExpired, recovery])
        var r = judge([purchase, failGrace], at: day(40))
        #expect(r.tier == .plus && r.phase == .grace && r.state?.graceExpiresAt == day(46))
        r = judge([failRetry, purchase], at: day(40))
        #expect(r.tier == .free && r.phase == .billingRetry)
        r = judge([graceExpired, failGrace, purchase], at: day(47))
        #expect(r.tier == .free && r.phase == .billingRetry, "GRACE_PERIOD_EXPIRED: retry without access")
        r = judge([recovery, graceExpired, failGrace, purchase], at: day(51))
        #expect(r.tier == .plus && r.phase == .active)
    }

    /// Turning auto-renew off during a grace period ends nothing before the grace end.
    @Test func autoRenewOffDuringGraceKeepsGrace() {
        let purchase = event(.revenuecat, .purchase, id: "p", at: day(0), purchased: 0, expires: 30)
        let issue = event(.revenuecat, .billingIssue, id: "b", at: day(30, hour: 1), purchased: 0, expires: 30, grace: day(46))
        let unsubscribe = event(.revenuecat, .cancellation, id: "c", at: day(31), purchased: 0, expires: 30, cancelReason: "UNSUBSCRIBE")
        let r = judge([unsubscribe, issue, purchase], at: day(35))
        #expect(r.tier == .plus && r.phase == .grace && r.state?.willRenew == false)
    }
}

@Suite struct RefundRuleTests {
    /// Two paid periods (P1 d0–30, P2 d30–60); a refund (or revocation) of P1 before or
    /// after P2 began leaves P2 standing; one of P2 ends access at its revocation; a reversal
    /// of P2 restores it, one of P1 does not. Both providers, both kinds, every arrival order.
    @Test func aRefundTakesBackItsOwnPeriodOnly() {
        for provider in [EventProvider.revenuecat, .appleNotification] {
            for kind in [EventKind.refund, .revoke] {
                let p1 = event(provider, .purchase, id: "1", at: day(0), purchased: 0, expires: 30)
                let p2 = event(provider, .renewal, id: "2", at: day(30), purchased: 30, expires: 60)
                for refundDay: Int64 in [10, 35] {
                    let refundP1 = event(provider, kind, id: "3", at: day(refundDay), purchased: 0, expires: 30)
                    _ = foldEveryOrder([p1, p2, refundP1])
                    let r = judge([refundP1, p2, p1], at: day(40))
                    #expect(
                        r.tier == .plus && r.phase == .active && r.state?.expiresAt == day(60),
                        "\(provider) \(kind) of P1 on day \(refundDay)")
                }
                let refundP2 = event(provider, kind, id: "4", at: day(35), purchased: 30, expires: 35)
                _ = foldEveryOrder([p1, p2, refundP2])
                var r = judge([refundP2, p1, p2], at: day(36))
                #expect(r.tier == .free && r.phase == .revoked && r.state?.expiresAt == day(35), "\(provider) \(kind) of P2")

                let reverseP2 = event(provider, .refundReversed, id: "5", at: day(37), purchased: 30, expires: 60)
                _ = foldEveryOrder([p1, p2, refundP2, reverseP2])
                r = judge([reverseP2, refundP2, p2, p1], at: day(38))
                #expect(r.tier == .plus && r.state?.expiresAt == day(60), "\(provider) reversal of P2 restores")
                let reverseP1 = event(provider, .refundReversed, id: "6", at: day(37), purchased: 0, expires: 30)
                r = judge([reverseP1, refundP2, p2, p1], at: day(38))
                #expect(r.tier == .free && r.phase == .revoked, "\(provider) a reversal of P1 does not undo P2's refund")
            }
        }
    }
}

@Suite struct RenewalInfoRuleTests {
    /// Renewal info on a notification of any kind: billing retry with grace ahead is grace,
    /// without it billing retry; autoRenewStatus is will-renew; autoRenewProductId another
    /// product is a pending change at the period end, the current product clears it.
    @Test func renewalInfoCountsOnAnyKind() {
        let purchase = event(.appleNotification, .purchase, id: "n1", at: day(0), purchased: 0, expires: 30)
        for kind in [EventKind.uncancellation, .priceIncrease, .extension, .cancellation, .unknown] {
            let graceInfo = event(
                .appleNotification, kind, id: "n2", at: day(30, hour: 2), purchased: 0, expires: 30,
                grace: day(44), inBillingRetry: true, willRenew: kind != .cancellation)
            let r = judge([graceInfo, purchase], at: day(35))
            #expect(r.tier == .plus && r.phase == .grace && r.state?.graceExpiresAt == day(44), "\(kind)")
            let retryInfo = event(
                .appleNotification, kind, id: "n2", at: day(30, hour: 2), purchased: 0, expires: 30,
                inBillingRetry: true, willRenew: true)
            #expect(judge([retryInfo, purchase], at: day(35)).phase == .billingRetry, "\(kind)")
        }
        let off = event(
            .appleNotification, .priceIncrease, id: "n3", at: day(5), purchased: 0, expires: 30,
            inBillingRetry: false, willRenew: false)
        #expect(judge([purchase, off], at: day(6)).state?.willRenew == false)
        let downgrade = event(
            .appleNotification, .renewal, id: "n4", at: day(30), purchased: 30, expires: 60, product: "pro.monthly",
            tier: .pro, inBillingRetry: false, willRenew: true, newProduct: "plus.monthly")
        var r = judge([purchase, downgrade], at: day(31))
        #expect(r.tier == .pro && r.state?.pendingChange == PendingChange(productId: "plus.monthly", tier: .plus, effectiveAt: day(60)))
        let same = event(
            .appleNotification, .uncancellation, id: "n5", at: day(32), purchased: 30, expires: 60, product: "pro.monthly",
            tier: .pro, inBillingRetry: false, willRenew: true, newProduct: "pro.monthly")
        r = judge([same, purchase, downgrade], at: day(33))
        #expect(r.state?.pendingChange == nil)
        // RevenueCat carries no renewal info: its events' fields say nothing of the kind.
        let rc = event(.revenuecat, .uncancellation, id: "r1", at: day(30, hour: 2), purchased: 0, expires: 30, grace: day(44))
        #expect(judge([event(.revenuecat, .purchase, id: "r0", at: day(0), purchased: 0, expires: 30), rc], at: day(35)).phase == .expired)
    }

    /// A notification of a type the server does not know still updates its subscription's
    /// period and expiry from its verified transaction; an older period changes nothing.
    @Test func unknownAppStoreTypeWithATransactionUpdatesThePeriod() {
        let purchase = event(.appleNotification, .purchase, id: "n1", at: day(0), purchased: 0, expires: 30)
        let laterPeriod = event(.appleNotification, .unknown, id: "n2", at: day(30), purchased: 30, expires: 60)
        #expect(laterPeriod.isApplicable)
        var r = judge([laterPeriod, purchase], at: day(40))
        #expect(r.tier == .plus && r.phase == .active && r.state?.expiresAt == day(60))
        let samePeriodLonger = event(.appleNotification, .unknown, id: "n3", at: day(10), purchased: 0, expires: 33)
        #expect(judge([purchase, samePeriodLonger], at: day(32)).state?.expiresAt == day(33))
        let olderPeriod = event(.appleNotification, .unknown, id: "n4", at: day(45), purchased: 0, expires: 30)
        r = judge([purchase, laterPeriod, olderPeriod], at: day(40))
        #expect(r.tier == .plus && r.state?.expiresAt == day(60), "an older period never rolls back")
        _ = foldEveryOrder([purchase, laterPeriod, olderPeriod, samePeriodLonger])
        // Without a transaction, or from RevenueCat, an unknown type is never applied.
        var bare = laterPeriod
        bare.subscriptionId = nil
        #expect(!bare.isApplicable)
        #expect(!event(.revenuecat, .unknown, id: "r", at: day(30), purchased: 30, expires: 60).isApplicable)
    }
}

@Suite struct QuotaRuleTests {
    /// Plan version 1 as migration 006 ships it.
    static let v1: [PublishedPlan] = {
        let sql = (try? String(contentsOfFile: Self.repo + "/sql/006_plans.sql", encoding: .utf8)) ?? ""
        let start = sql.range(of: "VALUES (1, '")!.upperBound
        let end = sql.range(of: "}}}}}'", range: start..<sql.endIndex)!.lowerBound
        let text = String(sql[start..<end]) + "}}}}}"
        let contract = try! PlanContract(json: try! JSON.parse(text))
        return [PublishedPlan(version: 1, contract: contract, publishedAt: Timestamp(millisecondsSinceEpoch: 0))]
    }()

    static var repo: String {
        var path = #filePath
        for _ in 0..<3 { path = String(path[..<path.lastIndex(of: "/")!]) }
        return path
    }

    enum Kind: String, CaseIterable { case paid, trial, grant, campaign }

    struct Case: CustomStringConvertible {
        var kind: Kind
        var tier: Tier
        var description: String { "\(kind.rawValue) \(tier.rawValue)" }
    }

    static let everySource: [Case] = Kind.allCases.flatMap { k in [Tier.plus, .pro].map { Case(kind: k, tier: $0) } }

    /// The snapshot of a user holding `cases` at day 3: store subscriptions (paid or trial)
    /// and grant/campaign overlays, resolved through the snapshot as the routes do.
    static func snapshot(_ cases: [Case]) -> AccessSnapshot {
        var subscriptions: [SubscriptionState] = []
        var overlays: [AccessSnapshot.AccessSource] = []
        for (i, c) in cases.enumerated() {
            switch c.kind {
            case .paid, .trial:
                let trial = c.kind == .trial
                subscriptions.append(
                    SubscriptionState(
                        subscriptionId: "s\(i)", provider: .appleNotification, productId: "\(c.tier.rawValue).monthly", tier: c.tier,
                        phase: trial ? .trial : .active, willRenew: true, inTrialPeriod: trial, purchasedAt: day(0),
                        expiresAt: trial ? day(7) : day(30), trialStartsAt: trial ? day(0) : nil, trialEndsAt: trial ? day(7) : nil,
                        lastEventAt: day(Int64(i))))
            case .grant, .campaign:
                overlays.append(
                    AccessSnapshot.AccessSource(
                        tier: c.tier, kind: c.kind.rawValue, expiresAt: nil,
                        campaign: c.kind == .campaign ? "c\(i)" : nil))
            }
        }
        var snapshot = AccessSnapshot(
            userId: "u", revision: 1, projection: StoreProjection(subscriptions: subscriptions),
            now: day(3), overlays: overlays)
        snapshot.userCreatedAt = day(-100)
        return snapshot
    }

    /// The contract tier a source alone is planned at, and its limit for `meter` (0 when
    /// the tier lacks it; nil unlimited): the oracle, written independently of the code.
    static func limit(_ c: Case, _ meter: String) -> Int64?? {
        let tier: PlanContract.PlanTier = c.kind == .trial ? .trial : c.tier == .pro ? .pro : .plus
        guard let m = v1[0].contract.tiers[tier]?.meters[meter] else { return .some(0) }
        return .some(m.limit)
    }

    static func generous(_ a: Int64?, _ b: Int64?) -> Int64? {
        guard let a, let b else { return nil }
        return max(a, b)
    }

    /// Every pair of sources (paid, trial, grant, campaign × plus, pro), and each alone:
    /// each meter's limit is the most generous of the two, capabilities are the highest
    /// tier's and never fewer than either source alone gives.
    @Test(arguments: QuotaRuleTests.everySource)
    func everyPairResolvesToTheMostGenerous(_ first: Case) {
        let contract = Self.v1[0].contract
        for second in [nil] + Self.everySource.map(Optional.some) {
            let cases = [first] + (second.map { [$0] } ?? [])
            let plan = QuotaResolution.plan(sources: Self.snapshot(cases).planSources, plans: Self.v1, anchor: day(-100), now: day(3))
            for meter in contract.meterNames {
                var expected: Int64? = 0
                for (i, c) in cases.enumerated() {
                    let l = Self.limit(c, meter)!
                    expected = i == 0 ? l : Self.generous(expected, l)
                }
                let got = plan.meters.first { $0.name == meter }
                #expect(
                    got != nil && got!.limit == expected, "\(cases) \(meter): \(String(describing: got?.limit)) != \(String(describing: expected))")
                // The window is that of a tier giving the limit (the trial window for a trial).
                if let got {
                    #expect(contract.tiers[got.planTier]?.meters[meter]?.limit == expected)
                    if got.planTier == .trial, contract.tiers[.trial]?.meters[meter]?.window == .trial {
                        #expect(got.window == QuotaWindow(start: day(0), end: day(7)))
                    }
                }
            }
            let highest: PlanContract.PlanTier = cases.contains { $0.tier == .pro } ? .pro : .plus
            let capabilities = Set(plan.capabilities)
            #expect(capabilities.isSuperset(of: contract.tiers[highest]!.capabilities), "\(cases)")
            for c in cases {
                let alone = QuotaResolution.plan(sources: Self.snapshot([c]).planSources, plans: Self.v1, anchor: day(-100), now: day(3))
                #expect(capabilities.isSuperset(of: alone.capabilities), "\(cases) lost capabilities of \(c)")
            }
        }
    }

    /// The cases the issue names, spelled out.
    @Test func aTrialNeverLowersWhatIsAlreadyGiven() {
        func limits(_ cases: [Case]) -> [String: Int64?] {
            let plan = QuotaResolution.plan(sources: Self.snapshot(cases).planSources, plans: Self.v1, anchor: day(-100), now: day(3))
            return Dictionary(uniqueKeysWithValues: plan.meters.map { ($0.name, $0.limit) })
        }
        let plusGrantPlusTrial = limits([Case(kind: .grant, tier: .plus), Case(kind: .trial, tier: .plus)])
        #expect(plusGrantPlusTrial["recurringGeneration"] == 2 && plusGrantPlusTrial["fileUploads"] == 20)
        let paidPlusProTrial = limits([Case(kind: .paid, tier: .plus), Case(kind: .trial, tier: .pro)])
        #expect(paidPlusProTrial["recurringGeneration"] == 2 && paidPlusProTrial["fileUploads"] == 20)
        let trialAlone = limits([Case(kind: .trial, tier: .plus)])
        #expect(trialAlone["recurringGeneration"] == 1 && trialAlone["fileUploads"] == 5, "a trial alone keeps the trial allowance")
        let free = QuotaResolution.plan(sources: Self.snapshot([]).planSources, plans: Self.v1, anchor: day(-100), now: day(3))
        #expect(free.planTier == .free && free.meters.first { $0.name == "recurringGeneration" }?.limit == 1)
        let proTrial = QuotaResolution.plan(
            sources: Self.snapshot([Case(kind: .trial, tier: .pro)]).planSources, plans: Self.v1,
            anchor: day(-100), now: day(3))
        #expect(proTrial.capabilities.contains("sourceMonitoring"), "a Pro trial gives Pro's capabilities")
    }

    /// A lapsed source counts for nothing: the trial that ended leaves the paid period's plan.
    @Test func onlySourcesInForceCount() {
        let snapshot = Self.snapshot([Case(kind: .trial, tier: .pro), Case(kind: .paid, tier: .plus)])
        var later = AccessSnapshot(
            userId: "u", revision: 1,
            projection: StoreProjection(
                subscriptions: [snapshot.store!] + snapshot.storeInForce.filter { $0.subscriptionId != snapshot.store!.subscriptionId }), now: day(8))
        later.userCreatedAt = day(-100)
        #expect(later.planSources.map(\.tier) == [.plus])
        let plan = QuotaResolution.plan(sources: later.planSources, plans: Self.v1, anchor: day(-100), now: day(8))
        #expect(!plan.capabilities.contains("sourceMonitoring") && plan.planTier == .plus)
    }
}
