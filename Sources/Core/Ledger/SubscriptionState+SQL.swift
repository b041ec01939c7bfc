extension SubscriptionState {
    static let columns = """
        s.subscription_id, s.provider, s.platform, s.environment, s.product_id, s.tier, s.phase, s.will_renew,
        s.in_trial_period, s.purchased_at, s.expires_at, s.grace_expires_at, s.trial_starts_at, s.trial_ends_at,
        s.pending_product_id, s.pending_tier, s.pending_effective_at, s.expires_before_revocation, s.last_event_at
        """

    /// A `billing_subscriptions` row (columns `SubscriptionState.columns`).
    init(row: SQLRow) throws(DatabaseError) {
        var pending: PendingChange?
        if let product = try row.optionalString("pending_product_id") {
            pending = PendingChange(
                productId: product,
                tier: try row.optionalString("pending_tier").flatMap(Tier.init(rawValue:)),
                effectiveAt: try row.optionalTimestamp("pending_effective_at"))
        }
        self.init(
            subscriptionId: try row.string("subscription_id"),
            provider: EventProvider(rawValue: try row.string("provider")) ?? .revenuecat,
            platform: try row.optionalString("platform"),
            environment: StoreEnvironment(rawValue: try row.string("environment")) ?? .production,
            productId: try row.optionalString("product_id"),
            tier: try row.optionalString("tier").flatMap(Tier.init(rawValue:)),
            phase: AccessPhase(rawValue: try row.string("phase")) ?? .none,
            willRenew: try row.bool("will_renew"),
            inTrialPeriod: try row.bool("in_trial_period"),
            purchasedAt: try row.optionalTimestamp("purchased_at"),
            expiresAt: try row.optionalTimestamp("expires_at"),
            graceExpiresAt: try row.optionalTimestamp("grace_expires_at"),
            trialStartsAt: try row.optionalTimestamp("trial_starts_at"),
            trialEndsAt: try row.optionalTimestamp("trial_ends_at"),
            pendingChange: pending,
            expiresBeforeRevocation: try row.optionalTimestamp("expires_before_revocation"),
            lastEventAt: try row.timestamp("last_event_at"))
    }

    /// Writes this subscription's row for `userId`: inserted, or its columns replaced in
    /// place when the row exists (one statement either way, and no delete-and-insert churn
    /// in the table's indexes on every renewal).
    func store(userId: String, on db: DatabaseConnection) throws(DatabaseError) {
        try db.execute(
            """
            INSERT INTO billing_subscriptions (user_id, subscription_id, provider, platform, environment, product_id, tier,
              phase, will_renew, in_trial_period, purchased_at, expires_at, grace_expires_at, trial_starts_at, trial_ends_at,
              pending_product_id, pending_tier, pending_effective_at, expires_before_revocation, last_event_at)
            VALUES (\(userId), \(subscriptionId), \(provider.rawValue), \(platform), \(environment.rawValue), \(productId),
              \(tier?.rawValue), \(phase.rawValue), \(willRenew), \(inTrialPeriod), \(purchasedAt), \(expiresAt),
              \(graceExpiresAt), \(trialStartsAt), \(trialEndsAt), \(pendingChange?.productId), \(pendingChange?.tier?.rawValue),
              \(pendingChange?.effectiveAt), \(expiresBeforeRevocation), \(lastEventAt))
            ON DUPLICATE KEY UPDATE provider = VALUES(provider), platform = VALUES(platform), environment = VALUES(environment),
              product_id = VALUES(product_id), tier = VALUES(tier), phase = VALUES(phase), will_renew = VALUES(will_renew),
              in_trial_period = VALUES(in_trial_period), purchased_at = VALUES(purchased_at), expires_at = VALUES(expires_at),
              grace_expires_at = VALUES(grace_expires_at), trial_starts_at = VALUES(trial_starts_at),
              trial_ends_at = VALUES(trial_ends_at), pending_product_id = VALUES(pending_product_id),
              pending_tier = VALUES(pending_tier), pending_effective_at = VALUES(pending_effective_at),
              expires_before_revocation = VALUES(expires_before_revocation), last_event_at = VALUES(last_event_at)
            """)
    }
}
