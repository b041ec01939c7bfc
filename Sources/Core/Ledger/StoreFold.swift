/// The store projection as a pure function: fold a user's events in intrinsic order.
///
/// Arrival order never matters: the same set of events gives the same projection however
/// they arrived, because the fold sorts them first (`foldOrder`). A late event simply
/// means the user is folded again from the inbox. No clock is involved: expiry is judged
/// at read time (`SubscriptionState.grantsAccess(at:)`).
enum StoreFold {
    /// - Parameters:
    ///   - events: every event of the user, in any order. For a transfer *to* this user,
    ///     the caller includes the sender's events from before the transfer (they are the
    ///     subscriptions being moved).
    ///   - userId: whose projection this is (decides the direction of transfers).
    static func fold(_ events: [StoreEvent], userId: String) -> StoreProjection {
        var states: [String: SubscriptionState] = [:]
        var lastEventAt: Timestamp?
        var applied = 0
        // Source precedence per subscription id: when the App Store itself (a verified
        // notification or transaction) describes a subscription, RevenueCat's relayed view of
        // the same subscription is left out, so the two never fold into conflicting state.
        // Apple's data is first-hand and signed; RevenueCat's is a later, unsigned copy.
        let appleSubscriptions = Set(events.filter { $0.provider.isApple && $0.isApplicable }.compactMap(\.subscriptionId))
        // RevenueCat's pulled state names no original transaction (SPEC §15): it speaks for
        // the subscription its webhooks name with the same product and store.
        let pulledKeys = pulledSubscriptionKeys(events)
        for event in events.sorted(by: foldOrder) where event.isApplicable {
            if !event.provider.isApple, let id = event.subscriptionId, appleSubscriptions.contains(id) { continue }
            guard let at = event.intrinsicAt else { continue }
            applied += 1
            lastEventAt = at
            if event.kind == .transfer {
                // The sender stands down: nothing keeps paying for what it had. The receiver
                // gains it through the sender's events the caller spliced in.
                if event.transferredFrom.contains(userId) { states.removeAll() }
                continue
            }
            var key = subscriptionKey(event)
            if event.provider == .revenuecatPull, let webhookKey = pulledKeys[pullMatch(event)] {
                if appleSubscriptions.contains(webhookKey) { continue }
                key = webhookKey
            }
            states[key] = apply(event, at: at, to: states[key], key: key)
        }
        endReplaced(&states, events)
        return StoreProjection(
            subscriptions: states.values.sorted(by: SubscriptionState.projectionOrder),
            lastEventAt: lastEventAt, appliedEvents: applied)
    }

    /// A Google Play subscription another token replaces (`linkedPurchaseToken`: an upgrade,
    /// a downgrade, a re-signup) ends when its replacement starts, whatever its own last
    /// statement says (Play may still call it active until its period ends): the two are one
    /// purchase history, never counted twice. Decided over the whole set, so arrival order
    /// cannot change it.
    private static func endReplaced(_ states: inout [String: SubscriptionState], _ events: [StoreEvent]) {
        var replacedAt: [String: Timestamp] = [:]
        for event in events where event.provider == .googlePlay && event.isApplicable {
            guard let replaced = event.replacesSubscriptionId, let at = event.purchasedAt ?? event.intrinsicAt else { continue }
            replacedAt[replaced] = min(replacedAt[replaced] ?? at, at)
        }
        for (key, at) in replacedAt {
            guard var s = states[key], s.phase != .none else { continue }
            s.expiresAt = min(s.expiresAt ?? at, at)
            if s.phase != .revoked { s.phase = .expired }
            s.willRenew = false
            s.graceExpiresAt = nil
            s.pendingChange = nil
            states[key] = s
        }
    }

    /// The subscription key of a pulled RevenueCat state that no webhook names yet:
    /// `revenuecat:<product>@<store>` (stored as its `subscription_id`).
    static let pulledKeyPrefix = "revenuecat:"

    /// What a pulled RevenueCat subscription is matched by: its product and store.
    static func pullMatch(_ event: StoreEvent) -> String {
        "\(event.productId ?? "")\u{1F}\(event.platform ?? "")"
    }

    /// For each (product, store) that RevenueCat webhooks name, the subscription id of the
    /// latest such webhook in fold order: the subscription a pulled state of that product
    /// and store speaks for. Computed over the whole set, so arrival order cannot change it.
    static func pulledSubscriptionKeys(_ events: [StoreEvent]) -> [String: String] {
        guard events.contains(where: { $0.provider == .revenuecatPull }) else { return [:] }
        var keys: [String: (event: StoreEvent, key: String)] = [:]
        for event in events where event.provider == .revenuecat && event.isApplicable && event.kind != .transfer {
            guard let id = event.subscriptionId, !id.isEmpty, event.productId != nil else { continue }
            let match = pullMatch(event)
            if let known = keys[match], !foldOrder(known.event, event) { continue }
            keys[match] = (event, id)
        }
        return keys.mapValues(\.key)
    }

    /// `fold(events + [event])` computed from `fold(events)` alone, when that is provably the
    /// same: `event` sorts strictly after every folded event (a later intrinsic time), is
    /// not a transfer, and does not change which provider speaks for its subscription.
    /// nil when a full re-fold is needed.
    static func appending(_ event: StoreEvent, to projection: StoreProjection) -> StoreProjection? {
        guard event.isApplicable, event.kind != .transfer, let at = event.intrinsicAt else { return nil }
        if let last = projection.lastEventAt, !(at > last) { return nil }
        if projection.lastEventAt == nil && projection.appliedEvents > 0 { return nil }
        let key = subscriptionKey(event)
        var states = Dictionary(uniqueKeysWithValues: projection.subscriptions.map { ($0.subscriptionId, $0) })
        let current = states[key]
        // Provider precedence is decided over all of a subscription's events: only an event
        // of the same family as the folded state (or the first one) can be appended. Pulled
        // RevenueCat state is matched to a subscription over the whole set: never appended.
        guard event.provider != .revenuecatPull else { return nil }
        // A Play token's replacement is decided over the whole set too (`endReplaced`).
        guard event.provider != .googlePlay else { return nil }
        // A webhook may be the first to name the subscription of a pulled state folded
        // under its own key so far: which subscription that state speaks for changes.
        if event.provider == .revenuecat, projection.subscriptions.contains(where: { $0.subscriptionId.hasPrefix(pulledKeyPrefix) }) {
            return nil
        }
        if let current, current.provider.isApple != event.provider.isApple { return nil }
        if current == nil, !projection.subscriptions.isEmpty || projection.appliedEvents > 0 {
            // A key absent from a non-empty history may be one a transfer cleared, or one
            // whose other provider's events were set aside: re-fold to be exact.
            return nil
        }
        states[key] = apply(event, at: at, to: current, key: key)
        return StoreProjection(
            subscriptions: states.values.sorted(by: SubscriptionState.projectionOrder),
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
        var s =
            current
            ?? SubscriptionState(
                subscriptionId: key, provider: event.provider, platform: event.platform,
                environment: event.environment, productId: event.productId,
                tier: event.tier, expiresAt: event.expiresAt, lastEventAt: at)
        s.provider = event.provider
        s.environment = event.environment
        s.platform = event.platform ?? s.platform
        s.lastEventAt = at

        switch event.kind {
        case .purchase where event.provider.isApple && isStalePeriod(event, s),
            .renewal where event.provider.isApple && isStalePeriod(event, s):
            // An App Store transaction for an older period than the one folded (a restore or
            // StoreKit replay, freshly signed) never rolls the subscription back.
            break
        case .purchase, .renewal, .promotional, .temporaryGrant, .nonRenewingPurchase:
            startPeriod(&s, event, at: at)
        case _ where event.kind.isInformational:
            // A type the server does not know (or one that only informs), carrying a
            // verified transaction: the transaction still tells the subscription's period
            // and expiry.
            updatePeriod(&s, event, at: at)
        case .subscriberState where event.provider == .googlePlay:
            applyPlayState(&s, event, at: at)
        case .subscriberState:
            applySubscriberState(&s, event, at: at)
        case .cancellation:
            s.willRenew = false
            if s.phase == .none { adoptProduct(&s, event) }
            s.expiresAt = event.expiresAt ?? s.expiresAt
            // Turning auto-renew off during a grace period does not end the grace period.
            if s.phase == .grace, let grace = s.graceExpiresAt, grace > at { break }
            if [.none, .trial, .active, .grace, .billingRetry].contains(s.phase) { s.phase = .canceled }
        case .refund, .revoke:
            // A refund (or revocation) takes back what its own transaction granted: one of an
            // earlier period than the folded one leaves the later paid period standing.
            if isEarlierPeriod(event, s) { break }
            s.willRenew = false
            if s.phase == .none { adoptProduct(&s, event) }
            let before = event.expiresAt ?? s.expiresAt
            if s.phase != .revoked { s.expiresBeforeRevocation = before }
            s.expiresAt = min(before ?? at, at)
            s.phase = .revoked
            s.pendingChange = nil
        case .refundReversed:
            if isEarlierPeriod(event, s) { break }
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
            // A failed charge (RevenueCat BILLING_ISSUE or CANCELLATION/BILLING_ERROR, App
            // Store DID_FAIL_TO_RENEW or GRACE_PERIOD_EXPIRED) is not a decision to leave.
            if s.phase == .none { adoptProduct(&s, event) }
            if s.phase == .revoked { break }
            s.expiresAt = event.expiresAt ?? s.expiresAt
            enterBillingRetry(&s, grace: event.graceExpiresAt, at: at)
        case .productChange:
            if s.phase == .none {
                adoptProduct(&s, event)
                s.phase = .active
            }
            let target = event.newProductId ?? event.productId
            if let target, target != s.productId {
                s.pendingChange = PendingChange(
                    productId: target, tier: event.newTier,
                    effectiveAt: event.effectiveAt ?? s.expiresAt)
            } else {
                s.pendingChange = nil  // changed back to the current product
            }
        case .`extension`:
            if s.phase == .none {
                adoptProduct(&s, event)
                s.phase = .active
            }
            if let expires = event.expiresAt { s.expiresAt = max(expires, s.expiresAt ?? expires) }
        case .pause:
            s.willRenew = false
        case .transfer, .test, .priceIncrease, .unknown, .consumptionRequest, .refundDeclined, .renewalExtension,
            .externalPurchaseToken, .consentRescinded, .metadataUpdate, .migration, .priceChange, .invoiceIssuance,
            .virtualCurrencyTransaction, .experimentEnrollment, .subscriberAlias:
            break
        }
        applyRenewalInfo(&s, event, at: at)
        return s
    }

    /// App Store renewal info, wherever it arrives (SPEC §5): auto-renew, billing retry and
    /// grace, and the product the subscription renews to (a pending plan change). It states
    /// the subscription's renewal as of the event's own signed time, so applying it in fold
    /// order leaves the latest statement in force.
    private static func applyRenewalInfo(_ s: inout SubscriptionState, _ event: StoreEvent, at: Timestamp) {
        if let willRenew = event.willRenew { s.willRenew = willRenew }
        guard event.provider.isApple else { return }
        if event.inBillingRetry == true, event.kind != .billingIssue, ![.none, .revoked, .expired].contains(s.phase) {
            enterBillingRetry(&s, grace: event.graceExpiresAt, at: at)
        }
        // The product it renews to: another product is a pending change effective at the end
        // of the period; the current one clears it. (RevenueCat states changes as events.)
        if event.kind != .productChange, event.inBillingRetry != nil, let next = event.newProductId,
            ![.revoked, .expired].contains(s.phase)
        {
            if next != s.productId {
                s.pendingChange = PendingChange(productId: next, tier: event.newTier, effectiveAt: event.effectiveAt ?? s.expiresAt)
            } else {
                s.pendingChange = nil
            }
        }
    }

    /// A failed renewal charge: access continues while a grace period lies ahead; without
    /// one (or once it is over) the store retries without access. A notice that carries no
    /// grace end never ends a grace period still running (RevenueCat sends BILLING_ISSUE and
    /// CANCELLATION/BILLING_ERROR for one failure, in either order).
    private static func enterBillingRetry(_ s: inout SubscriptionState, grace: Timestamp?, at: Timestamp) {
        if let grace, grace > at {
            s.phase = .grace
            s.graceExpiresAt = grace
        } else if grace == nil, s.phase == .grace, let running = s.graceExpiresAt, running > at {
            // Keep the grace period already known.
        } else {
            s.phase = .billingRetry
            s.graceExpiresAt = nil
        }
    }

    /// RevenueCat's whole view of a subscription as of the request (`StoreEvent` from
    /// `RevenueCatSubscriber`): its current period (product, start, expiry, trial), whether
    /// it renews, and a billing issue with its grace. A refund seen by pulling arrives as a
    /// `refund` event of its own. A period older than the folded one changes nothing.
    private static func applySubscriberState(_ s: inout SubscriptionState, _ event: StoreEvent, at: Timestamp) {
        if isEarlierPeriod(event, s) { return }
        let samePeriod = s.phase != .none && event.purchasedAt != nil && !isLaterPeriod(event, s)
        if samePeriod {
            adoptProduct(&s, event)
            s.expiresAt = event.expiresAt ?? s.expiresAt
            if s.phase == .revoked { return }  // a refund of this very period stands
        } else {
            startPeriod(&s, event, at: at)
        }
        s.willRenew = event.willRenew ?? s.willRenew
        if event.inBillingRetry == true {
            enterBillingRetry(&s, grace: event.graceExpiresAt, at: at)
        } else if let expires = s.expiresAt, expires <= at {
            s.phase = .expired
            s.willRenew = false
            s.graceExpiresAt = nil
        } else {
            s.graceExpiresAt = nil
            s.phase = s.inTrialPeriod ? (s.willRenew ? .trial : .canceled) : (s.willRenew ? .active : .canceled)
        }
    }

    /// A Play subscription's whole state as the Play Developer API read it
    /// (`GooglePlayEvent`): product, expiry, auto-renew, a free trial, and a failed payment
    /// as billing retry with grace (IN_GRACE_PERIOD: `graceExpiresAt`) or without
    /// (ON_HOLD); EXPIRED and PAUSED arrive as `expiration` events. Play states no period
    /// start, so each statement simply replaces the last
    /// (they are ordered by when they were read). A voided purchase stands against a later
    /// read that still shows the voided period (Play may take a moment to expire it); a
    /// later expiry (a new paid period) ends it.
    private static func applyPlayState(_ s: inout SubscriptionState, _ event: StoreEvent, at: Timestamp) {
        if s.phase == .revoked, let voided = s.expiresBeforeRevocation, (event.expiresAt ?? voided) <= voided { return }
        adoptProduct(&s, event)
        s.expiresAt = event.expiresAt
        s.purchasedAt = s.purchasedAt ?? event.purchasedAt ?? at
        s.expiresBeforeRevocation = nil
        s.pendingChange = nil
        s.willRenew = event.willRenew ?? false
        if event.isTrial {
            if !s.inTrialPeriod || s.trialStartsAt == nil { s.trialStartsAt = event.purchasedAt ?? at }
            s.inTrialPeriod = true
            s.trialEndsAt = event.expiresAt
        } else {
            s.inTrialPeriod = false
        }
        if event.inBillingRetry == true {
            // Play says which: in grace (access until its end) or on hold (none). A read
            // without grace ends a grace period an earlier read showed.
            if let grace = event.graceExpiresAt, grace > at {
                s.phase = .grace
                s.graceExpiresAt = grace
            } else {
                s.phase = .billingRetry
                s.graceExpiresAt = nil
            }
        } else {
            // Access until the expiry, judged when read: an ACTIVE state past it is a renewal
            // not seen yet (the sweeper's `renewal_overdue`); EXPIRED arrives as an expiration.
            s.graceExpiresAt = nil
            s.phase = s.willRenew ? (s.inTrialPeriod ? .trial : .active) : .canceled
        }
    }

    /// A transaction of a type the fold does not know: a later period starts it (as a
    /// renewal would, keeping the auto-renew state); the same period updates its expiry; an
    /// older one changes nothing.
    private static func updatePeriod(_ s: inout SubscriptionState, _ event: StoreEvent, at: Timestamp) {
        if isStalePeriod(event, s) { return }
        let samePeriod = s.phase != .none && event.purchasedAt != nil && event.purchasedAt == s.purchasedAt
        if samePeriod {
            if let expires = event.expiresAt { s.expiresAt = expires }
            return
        }
        let willRenew = s.phase == .none ? true : s.willRenew
        startPeriod(&s, event, at: at)
        s.willRenew = willRenew
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
        isEarlierPeriod(event, s)
    }

    /// Whether the event's transaction is of a period that started before the folded one:
    /// its purchase date is earlier than the current period's.
    private static func isEarlierPeriod(_ event: StoreEvent, _ s: SubscriptionState) -> Bool {
        guard s.phase != .none, let started = event.purchasedAt, let current = s.purchasedAt else { return false }
        return periodStart(started, event) < periodStart(current, event)
    }

    /// Whether the event's transaction is of a period that started after the folded one.
    private static func isLaterPeriod(_ event: StoreEvent, _ s: SubscriptionState) -> Bool {
        guard let started = event.purchasedAt, let current = s.purchasedAt else { return true }
        return periodStart(started, event) > periodStart(current, event)
    }

    /// A period's start as `event` can state it: RevenueCat's REST API gives dates in whole
    /// seconds where its webhooks give milliseconds, so a pulled event compares periods by
    /// the second (the same purchase is the same period).
    private static func periodStart(_ time: Timestamp, _ event: StoreEvent) -> Int64 {
        let ms = time.millisecondsSinceEpoch
        guard event.provider == .revenuecatPull else { return ms }
        return ms >= 0 ? ms / 1000 : (ms - 999) / 1000
    }

    private static func adoptProduct(_ s: inout SubscriptionState, _ event: StoreEvent) {
        if let product = event.productId { s.productId = product }
        if let tier = event.tier { s.tier = tier }
        if event.isTrial && s.phase == .none { s.inTrialPeriod = true }
    }
}
