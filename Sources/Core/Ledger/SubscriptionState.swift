/// The phase of a user's access, as the snapshot reports it.
enum AccessPhase: String, Sendable, CaseIterable {
    case none
    case trial
    case active
    /// Auto-renew is off; access continues until expiry.
    case canceled
    /// A payment failed; the store keeps access until the grace period ends.
    case grace
    /// A payment failed and there is no grace period: no access while the store retries.
    case billingRetry
    case expired
    /// Refunded or revoked: access ended early.
    case revoked
}

/// A product change that is recorded but not yet in effect (SPEC §5, seeds/003): a
/// downgrade waits for the period end, an upgrade for its confirmed transaction.
struct PendingChange: Sendable, Equatable {
    var productId: String
    var tier: Tier?
    var effectiveAt: Timestamp?

    init(productId: String, tier: Tier?, effectiveAt: Timestamp?) {
        self.productId = productId
        self.tier = tier
        self.effectiveAt = effectiveAt
    }
}

/// One store subscription of a user as the fold leaves it. Stored in `billing_subscriptions`.
struct SubscriptionState: Sendable, Equatable {
    /// The order of a projection's subscriptions, wherever one is built (the fold) or read
    /// back (the stored rows): two projections compare equal only when listed alike.
    static func projectionOrder(_ a: SubscriptionState, _ b: SubscriptionState) -> Bool {
        a.subscriptionId < b.subscriptionId
    }

    var subscriptionId: String
    var provider: EventProvider
    var platform: String?
    var environment: StoreEnvironment
    var productId: String?
    /// nil when the product maps to no paid tier (it then grants nothing).
    var tier: Tier?
    var phase: AccessPhase
    var willRenew: Bool
    /// Whether the current period is a free trial.
    var inTrialPeriod: Bool
    var purchasedAt: Timestamp?
    /// nil means no end (a lifetime non-renewing purchase).
    var expiresAt: Timestamp?
    var graceExpiresAt: Timestamp?
    var trialStartsAt: Timestamp?
    var trialEndsAt: Timestamp?
    var pendingChange: PendingChange?
    /// Expiry before a refund cut it short, so a reversed refund restores it.
    var expiresBeforeRevocation: Timestamp?
    var lastEventAt: Timestamp

    init(
        subscriptionId: String, provider: EventProvider, platform: String? = nil,
        environment: StoreEnvironment = .production, productId: String? = nil, tier: Tier? = nil,
        phase: AccessPhase = .none, willRenew: Bool = false, inTrialPeriod: Bool = false,
        purchasedAt: Timestamp? = nil, expiresAt: Timestamp? = nil, graceExpiresAt: Timestamp? = nil,
        trialStartsAt: Timestamp? = nil, trialEndsAt: Timestamp? = nil, pendingChange: PendingChange? = nil,
        expiresBeforeRevocation: Timestamp? = nil, lastEventAt: Timestamp
    ) {
        self.subscriptionId = subscriptionId
        self.provider = provider
        self.platform = platform
        self.environment = environment
        self.productId = productId
        self.tier = tier
        self.phase = phase
        self.willRenew = willRenew
        self.inTrialPeriod = inTrialPeriod
        self.purchasedAt = purchasedAt
        self.expiresAt = expiresAt
        self.graceExpiresAt = graceExpiresAt
        self.trialStartsAt = trialStartsAt
        self.trialEndsAt = trialEndsAt
        self.pendingChange = pendingChange
        self.expiresBeforeRevocation = expiresBeforeRevocation
        self.lastEventAt = lastEventAt
    }

    /// Whether this subscription grants its tier at `now`. Expiry is honoured here, at read
    /// time: an expired row reads as no access even if no EXPIRATION event ever arrived.
    func grantsAccess(at now: Timestamp) -> Bool {
        guard let tier, tier > .free else { return false }
        switch phase {
        case .trial, .active, .canceled:
            return expiresAt.map { now < $0 } ?? true
        case .grace:
            return (graceExpiresAt ?? expiresAt).map { now < $0 } ?? false
        case .billingRetry:
            return expiresAt.map { now < $0 } ?? false
        case .none, .expired, .revoked:
            return false
        }
    }

    /// Whether this subscription is in a store trial that gives access at `now` (the
    /// snapshot's `trial`, and the quota plan's trial source).
    func isTrialInForce(at now: Timestamp) -> Bool {
        inTrialPeriod && grantsAccess(at: now) && (phase == .trial || phase == .canceled)
    }

    /// The phase to report at `now`: a lapsed trial/active/canceled/grace reads `expired`.
    func phase(at now: Timestamp) -> AccessPhase {
        if grantsAccess(at: now) { return phase }
        switch phase {
        case .revoked, .billingRetry, .none: return phase
        default: return .expired
        }
    }
}

/// The result of folding a user's store events: every subscription's state.
struct StoreProjection: Sendable, Equatable {
    /// Sorted by subscription id, so equal projections compare equal.
    var subscriptions: [SubscriptionState]
    /// Intrinsic time of the last applied event.
    var lastEventAt: Timestamp?
    var appliedEvents: Int

    init(subscriptions: [SubscriptionState] = [], lastEventAt: Timestamp? = nil, appliedEvents: Int = 0) {
        self.subscriptions = subscriptions
        self.lastEventAt = lastEventAt
        self.appliedEvents = appliedEvents
    }

    static let empty = StoreProjection()

    /// The subscription that decides the store tier at `now`: the highest tier among those
    /// granting access (ties: the one lasting longest); without any, the most recently
    /// changed one (to report why there is no access).
    func primary(at now: Timestamp) -> SubscriptionState? {
        let granting = subscriptions.filter { $0.grantsAccess(at: now) }
        if let best = granting.max(by: { a, b in
            if a.tier != b.tier { return (a.tier ?? .free) < (b.tier ?? .free) }
            return (a.expiresAt?.millisecondsSinceEpoch ?? .max) < (b.expiresAt?.millisecondsSinceEpoch ?? .max)
        }) {
            return best
        }
        return subscriptions.max { a, b in
            a.lastEventAt != b.lastEventAt ? a.lastEventAt < b.lastEventAt : a.subscriptionId < b.subscriptionId
        }
    }
}
