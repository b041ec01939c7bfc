/// Whose API a pull asks, and so what its schedule row is keyed by: an App Store
/// subscription (its originalTransactionId), a RevenueCat subscriber (the app user id) or a
/// Google Play purchase token (its `gp:` subscription id).
enum ReconcileProvider: String, Sendable, CaseIterable {
    case apple, revenuecat, google
}

/// Which App Store subscriptions and RevenueCat subscribers the sweeper pulls, and when each
/// may be pulled again (SPEC §11, §15, `reconcile.*`): one rule for both. The rules are a pure function (`reason`); the SQL only
/// narrows the candidates to a superset of what they select (`candidates`).
struct ReconcileSchedule: Sendable, Equatable {
    var afterMilliseconds: Int64
    var intervalMilliseconds: Int64
    var endingWithinMilliseconds: Int64
    var batchSize: Int
    /// Waits after consecutive failed pulls of one subscription.
    var backoff: RetrySchedule

    /// Apple retries a failed renewal charge for up to 60 days after the period ended.
    static let billingRetryMilliseconds: Int64 = 60 * 86_400_000

    init(_ reconcile: BillingConfiguration.Reconcile) {
        afterMilliseconds = Int64(reconcile.afterSeconds) * 1000
        intervalMilliseconds = Int64(reconcile.intervalSeconds) * 1000
        endingWithinMilliseconds = Int64(reconcile.endingWithinSeconds) * 1000
        batchSize = reconcile.batchSize
        backoff = RetrySchedule(baseMilliseconds: intervalMilliseconds, capMilliseconds: Int64(reconcile.maxBackoffSeconds) * 1000)
    }

    /// Why a subscription is due for a pull.
    enum Reason: String, Sendable, CaseIterable {
        /// Its period ended more than `afterSeconds` ago while set to renew, and neither a
        /// renewal nor an expiry came (trial, active, or a billing retry still set to renew).
        case renewalOverdue = "renewal_overdue"
        /// Its grace period ends within `endingWithinSeconds` (or ended with no news).
        case graceEnding = "grace_ending"
        /// Its billing retry (60 days after the period) ends within `endingWithinSeconds`.
        case billingRetryEnding = "billing_retry_ending"
    }

    /// What the rules read of a candidate.
    struct Candidate: Sendable, Equatable {
        var provider: ReconcileProvider = .apple
        var subscriptionId: String
        var userId: String
        var phase: AccessPhase
        var willRenew: Bool
        var expiresAt: Timestamp?
        var graceExpiresAt: Timestamp?
        /// nil: never pulled.
        var nextAttemptAt: Timestamp?

        /// What a pull of it asks for: the App Store subscription or Play token, or the
        /// RevenueCat subscriber.
        var target: String { provider == .revenuecat ? userId : subscriptionId }
    }

    /// The rule, case by case; nil when the subscription is not due (not one of the cases,
    /// or already pulled within the interval, or backing off after failures).
    func reason(_ c: Candidate, now: Timestamp) -> Reason? {
        if let next = c.nextAttemptAt, next > now { return nil }
        guard let expires = c.expiresAt else { return nil }  // no end: nothing to renew
        let now = now.millisecondsSinceEpoch
        let ended = expires.millisecondsSinceEpoch
        switch c.phase {
        case .grace:
            guard let grace = c.graceExpiresAt else { return nil }
            return grace.millisecondsSinceEpoch <= now + endingWithinMilliseconds ? .graceEnding : nil
        case .trial, .active, .billingRetry:
            if c.willRenew, ended <= now - afterMilliseconds { return .renewalOverdue }
            if c.phase == .billingRetry, ended + Self.billingRetryMilliseconds <= now + endingWithinMilliseconds {
                return .billingRetryEnding
            }
            return nil
        case .none, .canceled, .expired, .revoked:
            return nil
        }
    }

    /// When a subscription may be pulled again after a pull: the interval after a success;
    /// after failure number `failures`, the backoff, and never before Retry-After.
    func nextAttempt(after now: Timestamp, failures: Int, retryAfterSeconds: Int?, jitter: Double) -> Timestamp {
        guard failures > 0 else { return now.adding(milliseconds: intervalMilliseconds) }
        let wait = max(backoff.delay(attempt: failures, jitter: jitter), Int64(retryAfterSeconds ?? 0) * 1000)
        return now.adding(milliseconds: wait)
    }

    // MARK: SQL

    /// A superset of the due subscriptions of `provider` — bound App Store ones, or those
    /// RevenueCat speaks for (webhooks or pulls) — first by how long they have been due;
    /// `reason` decides. At most `batchSize` rows.
    func candidates(now: Timestamp, provider: ReconcileProvider = .apple, on db: DatabaseConnection) throws(DatabaseError) -> [Candidate] {
        let source: SQLQuery
        switch provider {
        case .apple:
            source = """
                FROM billing_subscriptions s
                JOIN billing_apple_bindings b ON b.original_transaction_id = s.subscription_id AND b.user_id = s.user_id
                LEFT JOIN billing_reconcile_state r ON r.provider = 'apple' AND r.subscription_id = s.subscription_id
                WHERE s.provider IN (\(list: AppleBinding.appleProviders))
                """
        case .revenuecat:
            source = """
                FROM billing_subscriptions s
                LEFT JOIN billing_reconcile_state r ON r.provider = 'revenuecat' AND r.subscription_id = s.user_id
                WHERE s.provider IN (\(EventProvider.revenuecat.rawValue), \(EventProvider.revenuecatPull.rawValue))
                """
        case .google:
            source = """
                FROM billing_subscriptions s
                JOIN billing_google_purchases g ON g.subscription_id = s.subscription_id AND g.user_id = s.user_id
                LEFT JOIN billing_reconcile_state r ON r.provider = 'google' AND r.subscription_id = s.subscription_id
                WHERE s.provider = \(EventProvider.googlePlay.rawValue)
                """
        }
        let rows = try db.query(
            """
            SELECT s.subscription_id, s.user_id, s.phase, s.will_renew, s.expires_at, s.grace_expires_at,
                   r.next_attempt_at
            \(source)
              AND s.phase IN ('trial', 'active', 'grace', 'billingRetry')
              AND s.expires_at <= \(now.adding(milliseconds: endingWithinMilliseconds))
              AND (r.next_attempt_at IS NULL OR r.next_attempt_at <= \(now))
            ORDER BY COALESCE(r.next_attempt_at, s.expires_at), s.subscription_id
            LIMIT \(batchSize)
            """)
        return try rows.map { (row) throws(DatabaseError) -> Candidate in
            Candidate(
                provider: provider, subscriptionId: try row.string("subscription_id"), userId: try row.string("user_id"),
                phase: AccessPhase(rawValue: try row.string("phase")) ?? .none, willRenew: try row.bool("will_renew"),
                expiresAt: try row.optionalTimestamp("expires_at"), graceExpiresAt: try row.optionalTimestamp("grace_expires_at"),
                nextAttemptAt: try row.optionalTimestamp("next_attempt_at"))
        }
    }

    /// Claims `subscriptionId` for a pull now: pushes its next attempt one interval ahead, so
    /// a second sweeper (another host) skips it. false when another pull claimed it first.
    func claim(
        _ subscriptionId: String, provider: ReconcileProvider = .apple, now: Timestamp,
        on db: DatabaseConnection
    ) throws(DatabaseError) -> Bool {
        let next = now.adding(milliseconds: intervalMilliseconds)
        try db.execute(
            """
            INSERT IGNORE INTO billing_reconcile_state (provider, subscription_id, next_attempt_at)
            VALUES (\(provider.rawValue), \(subscriptionId), \(now))
            """)
        return try db.execute(
            """
            UPDATE billing_reconcile_state SET next_attempt_at = \(next), last_attempt_at = \(now)
            WHERE provider = \(provider.rawValue) AND subscription_id = \(subscriptionId) AND next_attempt_at <= \(now)
            """
        ).affectedRows == 1
    }

    /// A committed pull (inside the pull's own transaction).
    func recordSuccess(
        _ subscriptionId: String, provider: ReconcileProvider = .apple, environment: StoreEnvironment?,
        changed: Bool, now: Timestamp, on db: DatabaseConnection
    ) throws(DatabaseError) {
        let next = nextAttempt(after: now, failures: 0, retryAfterSeconds: nil, jitter: 0)
        try db.execute(
            """
            INSERT INTO billing_reconcile_state (provider, subscription_id, environment, next_attempt_at, last_attempt_at, last_success_at,
              last_outcome, last_error, failures, pulls, corrections)
            VALUES (\(provider.rawValue), \(subscriptionId), \(environment?.rawValue), \(next), \(now), \(now), \(changed ? "corrected" : "unchanged"), NULL, 0, 1,
              \(changed ? 1 : 0))
            ON DUPLICATE KEY UPDATE environment = VALUES(environment), next_attempt_at = VALUES(next_attempt_at),
              last_attempt_at = VALUES(last_attempt_at), last_success_at = VALUES(last_success_at),
              last_outcome = VALUES(last_outcome), last_error = NULL, failures = 0, pulls = pulls + 1, corrections = corrections + VALUES(corrections)
            """)
    }

    /// A failed pull, inside the caller's transaction (nothing else of the pull was
    /// written). Returns the next attempt.
    @discardableResult
    func recordFailure(
        _ subscriptionId: String, provider: ReconcileProvider = .apple, error: ProviderAPIError, now: Timestamp,
        on db: DatabaseConnection
    ) throws(DatabaseError) -> Timestamp {
        let failures =
            try db.queryOne(
                """
                SELECT failures FROM billing_reconcile_state
                WHERE provider = \(provider.rawValue) AND subscription_id = \(subscriptionId) FOR UPDATE
                """)?.int64("failures") ?? 0
        let next = nextAttempt(
            after: now, failures: Int(failures) + 1, retryAfterSeconds: error.retryAfterSeconds,
            jitter: Double.random(in: 0..<1))
        let outcome = error.kind == .rateLimited ? "rate_limited" : "failed"
        try db.execute(
            """
            INSERT INTO billing_reconcile_state (provider, subscription_id, next_attempt_at, last_attempt_at, last_outcome, last_error,
              failures, pulls)
            VALUES (\(provider.rawValue), \(subscriptionId), \(next), \(now), \(outcome), \(String(error.code.prefix(64))), 1, 1)
            ON DUPLICATE KEY UPDATE next_attempt_at = VALUES(next_attempt_at), last_attempt_at = VALUES(last_attempt_at),
              last_outcome = VALUES(last_outcome), last_error = VALUES(last_error), failures = failures + 1, pulls = pulls + 1
            """)
        return next
    }
}

extension ProviderAPIError {
    /// A short code for `billing_reconcile_state.last_error`: never a payload.
    var code: String {
        var text = statusLabel
        if let errorCode { text += "/\(errorCode)" }
        if kind == .verification { text += ":\(detail)" }
        return text
    }
}
