/// The store projection as a pure function: fold a user's events in intrinsic order.
///
/// Arrival order never matters: the same set of events gives the same projection however
/// they arrived, because the fold sorts them first (`foldOrder`). A late event simply
/// means the user is folded again from the inbox. No clock is involved: expiry is judged
/// at read time (`SubscriptionState.grantsAccess(at:)`).
public enum StoreFold {
    /// - Parameters:
    ///   - events: every event of the user, in any order. For a transfer *to* this user,
    ///     the caller includes the sender's events from before the transfer (they are the
    ///     subscriptions being moved).
    ///   - userId: whose projection this is (decides the direction of transfers).
    public static func fold(_ events: [StoreEvent], userId: String) -> StoreProjection {
        var states: [String: SubscriptionState] = [:]
        var lastEventAt: Timestamp?
        var applied = 0
        // Source precedence per subscription id: when the App Store itself (a verified
        // notification or transaction) describes a subscription, RevenueCat's relayed view of
        // the same subscription is left out, so the two never fold into conflicting state.
        // Apple's data is first-hand and signed; RevenueCat's is a later, unsigned copy.
        let appleSubscriptions = Set(events.filter { $0.provider != .revenuecat && $0.isApplicable }.compactMap(\.subscriptionId))
        for event in events.sorted(by: foldOrder) where event.isApplicable {
            if event.provider == .revenuecat, let id = event.subscriptionId, appleSubscriptions.contains(id) { continue }
            guard let at = event.intrinsicAt else { continue }
            applied += 1
            lastEventAt = at
            if event.kind == .transfer {
                // The sender stands down: nothing keeps paying for what it had. The receiver
                // gains it through the sender's events the caller spliced in.
                if event.transferredFrom.contains(userId) { states.removeAll() }
                continue
            }
            let key = subscriptionKey(event)
            states[key] = apply(event, at: at, to: states[key], key: key)
        }
        return StoreProjection(subscriptions: states.values.sorted { $0.subscriptionId < $1.subscriptionId },
                               lastEventAt: lastEventAt, appliedEvents: applied)
    }

    /// `fold(events + [event])` computed from `fold(events)` alone, when that is provably the
    /// same: `event` sorts strictly after every folded event (a later intrinsic time), is
    /// not a transfer, and does not change which provider speaks for its subscription.
    /// nil when a full re-fold is needed.
    public static func appending(_ event: StoreEvent, to projection: StoreProjection) -> StoreProjection? {
        guard event.isApplicable, event.kind != .transfer, let at = event.intrinsicAt else { return nil }
        if let last = projection.lastEventAt, !(at > last) { return nil }
        if projection.lastEventAt == nil && projection.appliedEvents > 0 { return nil }
        let key = subscriptionKey(event)
        var states = Dictionary(uniqueKeysWithValues: projection.subscriptions.map { ($0.subscriptionId, $0) })
        let current = states[key]
        // Provider precedence is decided over all of a subscription's events: only an event
        // of the same family as the folded state (or the first one) can be appended.
        let isApple = event.provider != .revenuecat
        if let current, (current.provider != .revenuecat) != isApple { return nil }
        if current == nil, !projection.subscriptions.isEmpty || projection.appliedEvents > 0 {
            // A key absent from a non-empty history may be one a transfer cleared, or one
            // whose other provider's events were set aside: re-fold to be exact.
            return nil
        }
        states[key] = apply(event, at: at, to: current, key: key)
        return StoreProjection(subscriptions: states.values.sorted { $0.subscriptionId < $1.subscriptionId },
                               lastEventAt: at, appliedEvents: projection.appliedEvents + 1)
    }

    /// Events of one subscription share its original transaction id; store-side grants
    /// without one are keyed by product.
    static func subscriptionKey(_ event: StoreEvent) -> String {
        if let id = event.subscriptionId, !id.isEmpty { return id }
        if let product = event.productId, !product.isEmpty { return "product:\(product)" }
        return "event:\(event.providerEventId)"
    }

    static func apply(_ event: StoreEvent, at: Timestamp, to current: SubscriptionState?, key: String) -> SubscriptionState {
        var s = current ?? SubscriptionState(subscriptionId: key, provider: event.provider, platform: event.platform,
                                             environment: event.environment, productId: event.productId,
                                             tier: event.tier, expiresAt: event.expiresAt, lastEventAt: at)
        s.provider = event.provider
        s.environment = event.environment
        s.platform = event.platform ?? s.platform
        s.lastEventAt = at
        if let willRenew = event.willRenew { s.willRenew = willRenew }

        switch event.kind {
        case .purchase where event.provider != .revenuecat && isStalePeriod(event, s),
             .renewal where event.provider != .revenuecat && isStalePeriod(event, s):
            // An App Store transaction for an older period than the one folded (a restore or
            // StoreKit replay, freshly signed) never rolls the subscription back.
            break
        case .purchase, .renewal, .promotional, .temporaryGrant, .nonRenewingPurchase:
            startPeriod(&s, event, at: at)
        case .cancellation:
            s.willRenew = false
            if s.phase == .none { adoptProduct(&s, event) }
            s.expiresAt = event.expiresAt ?? s.expiresAt
            if [.none, .trial, .active, .grace, .billingRetry].contains(s.phase) { s.phase = .canceled }
        case .refund:
            s.willRenew = false
            if s.phase == .none { adoptProduct(&s, event) }
            let before = event.expiresAt ?? s.expiresAt
            if s.phase != .revoked { s.expiresBeforeRevocation = before }
            s.expiresAt = min(before ?? at, at)
            s.phase = .revoked
            s.pendingChange = nil
        case .refundReversed:
            if s.phase == .revoked || s.phase == .none {
                if s.phase == .none { adoptProduct(&s, event) }
                s.expiresAt = event.expiresAt ?? s.expiresBeforeRevocation ?? s.expiresAt
                s.phase = s.inTrialPeriod ? .trial : .active
                s.expiresBeforeRevocation = nil
            }
        case .uncancellation:
            s.willRenew = true
            if s.phase == .none { adoptProduct(&s, event) }
            if s.phase == .canceled || s.phase == .none { s.phase = s.inTrialPeriod ? .trial : .active }
            s.expiresAt = event.expiresAt ?? s.expiresAt
        case .expiration:
            if s.phase == .none { adoptProduct(&s, event) }
            s.phase = s.phase == .revoked ? .revoked : .expired
            s.willRenew = false
            s.expiresAt = event.expiresAt.map { min($0, at) } ?? at
            s.graceExpiresAt = nil
            s.pendingChange = nil
        case .billingIssue:
            if s.phase == .none { adoptProduct(&s, event) }
            s.expiresAt = event.expiresAt ?? s.expiresAt
            if let grace = event.graceExpiresAt {
                s.phase = .grace
                s.graceExpiresAt = grace
            } else {
                s.phase = .billingRetry
                s.graceExpiresAt = nil
            }
        case .productChange:
            if s.phase == .none { adoptProduct(&s, event); s.phase = .active }
            let target = event.newProductId ?? event.productId
            if let target, target != s.productId {
                s.pendingChange = PendingChange(productId: target, tier: event.newTier,
                                                effectiveAt: event.effectiveAt ?? s.expiresAt)
            } else {
                s.pendingChange = nil  // changed back to the current product
            }
        case .`extension`:
            if s.phase == .none { adoptProduct(&s, event); s.phase = .active }
            if let expires = event.expiresAt { s.expiresAt = max(expires, s.expiresAt ?? expires) }
        case .pause:
            s.willRenew = false
        case .transfer, .test, .unknown, .priceIncrease:
            break
        }
        return s
    }

    /// A purchase, renewal or store grant opens a period with the event's product: the
    /// product (and tier) change only here, so a plan change takes effect with its
    /// confirming transaction and not with the PRODUCT_CHANGE notice.
    private static func startPeriod(_ s: inout SubscriptionState, _ event: StoreEvent, at: Timestamp) {
        adoptProduct(&s, event)
        s.expiresAt = event.expiresAt
        s.purchasedAt = event.purchasedAt ?? s.purchasedAt ?? at
        s.graceExpiresAt = nil
        s.expiresBeforeRevocation = nil
        s.inTrialPeriod = event.isTrial
        if event.isTrial {
            s.phase = .trial
            s.trialStartsAt = event.purchasedAt ?? at
            s.trialEndsAt = event.expiresAt
        } else {
            s.phase = .active
        }
        switch event.kind {
        case .purchase, .renewal: s.willRenew = event.willRenew ?? true
        default: s.willRenew = false
        }
        if let pending = s.pendingChange, pending.productId == event.productId { s.pendingChange = nil }
    }

    private static func isStalePeriod(_ event: StoreEvent, _ s: SubscriptionState) -> Bool {
        guard s.phase != .none, let started = event.purchasedAt, let current = s.purchasedAt else { return false }
        return started < current
    }

    private static func adoptProduct(_ s: inout SubscriptionState, _ event: StoreEvent) {
        if let product = event.productId { s.productId = product }
        if let tier = event.tier { s.tier = tier }
        if event.isTrial && s.phase == .none { s.inTrialPeriod = true }
    }
}
