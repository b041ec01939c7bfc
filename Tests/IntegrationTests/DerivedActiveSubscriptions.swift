@testable import Core

/// The plain definition of the subscriptions active at an instant, derived from the inbox
/// alone (what `stats.subscriptions` computed before the stored states of sql/025): the
/// reference the stored states (`SubscriptionStates`) are tested against, at every instant,
/// in every arrival order.
extension SubscriptionStats {
    /// Kinds that open a period of access (the product and price in force come from them).
    static func periodStart(_ a: String) -> String {
        "\(a).kind IN ('purchase', 'renewal', 'promotional', 'temporary_grant', 'non_renewing_purchase', 'subscriber_state')"
    }

    static let lostKinds = "('expiration', 'refund', 'revoke')"

    static let derivedIsTrial = "COALESCE(pe.is_trial, le.is_trial)"
    static let derivedIsShared = "COALESCE(pe.family_shared, le.family_shared)"
    /// A subscription that pays: not a trial, not family-shared, its period priced.
    static let derivedPaidPeriod = "(\(derivedIsTrial) = 0 AND \(derivedIsShared) = 0 AND pe.price_milli > 0)"

    /// `FROM … WHERE …` of the subscriptions active at `t`: `z` (the subscription, whether its
    /// renewal is off), `le` its latest event and `pe` its latest period start before t.
    static func derivedActiveSubscriptions(at t: Timestamp, environment env: String) -> SQLQuery {
        let latest = "ORDER BY p.intrinsic_at DESC, p.id DESC LIMIT 1"
        let sameSubscription: SQLQuery = """
            p.environment = \(env) AND p.subscription_id = s.subscription_id AND p.intrinsic_at < \(t) AND \(unsafeRaw: counted("p"))
            """
        // A refund or revocation of a period older than the latest period start takes back
        // that period only: the later one stands (SPEC §5).
        let earlierRefund = "(le.kind IN ('refund', 'revoke') AND pe.purchased_at IS NOT NULL AND le.purchased_at < pe.purchased_at)"
        let never = Timestamp(millisecondsSinceEpoch: 0)
        return """
            FROM (
              -- LIMIT: never merged (see dailyCounts).
              SELECT s.subscription_id,
                (SELECT p.id FROM billing_events p \(unsafeRaw: perSubscriptionIndex) WHERE \(sameSubscription) \(unsafeRaw: latest)) AS last_id,
                (SELECT p.id FROM billing_events p \(unsafeRaw: perSubscriptionIndex) WHERE \(sameSubscription) AND \(unsafeRaw: periodStart("p"))
                  \(unsafeRaw: latest)) AS period_id,
                (SELECT (p.will_renew = 0 OR (p.will_renew IS NULL AND p.kind IN ('cancellation', 'pause')))
                  FROM billing_events p \(unsafeRaw: perSubscriptionIndex) WHERE \(sameSubscription)
                    AND (p.will_renew IS NOT NULL OR p.kind IN ('purchase', 'renewal', 'cancellation', 'uncancellation', 'pause'))
                  \(unsafeRaw: latest)) AS cancelling
              FROM (
                SELECT DISTINCT e.subscription_id FROM billing_events e
                WHERE e.environment = \(env) AND e.expires_at > \(t) AND e.intrinsic_at < \(t) AND \(unsafeRaw: counted("e"))
                UNION
                SELECT e.subscription_id FROM billing_events e
                WHERE e.environment = \(env) AND e.grace_expires_at > \(t) AND e.intrinsic_at < \(t) AND \(unsafeRaw: counted("e"))
              ) s
              LIMIT 18446744073709551615
            ) z
            JOIN billing_events le ON le.id = z.last_id
            LEFT JOIN billing_events pe ON pe.id = z.period_id
            WHERE NOT (le.kind IN \(unsafeRaw: lostKinds) AND NOT \(unsafeRaw: earlierRefund))
              -- A Play subscription another token replaced (linkedPurchaseToken) ends when its
              -- replacement starts, as the fold ends it: never counted twice.
              AND NOT EXISTS (SELECT 1 FROM billing_events r
                              WHERE r.linked_subscription_id = z.subscription_id AND r.environment = \(env)
                                AND r.provider = 'google_play' AND COALESCE(r.purchased_at, r.intrinsic_at) <= \(t)
                                AND \(unsafeRaw: counted("r")))
              AND GREATEST(COALESCE(
                CASE WHEN \(unsafeRaw: earlierRefund) THEN pe.expires_at
                  WHEN le.expires_at IS NOT NULL THEN GREATEST(le.expires_at, COALESCE(le.grace_expires_at, le.expires_at))
                  ELSE (SELECT GREATEST(p.expires_at, COALESCE(p.grace_expires_at, p.expires_at)) FROM billing_events p
                        WHERE p.environment = \(env) AND p.subscription_id = z.subscription_id AND p.intrinsic_at < \(t)
                          AND \(unsafeRaw: counted("p")) AND p.expires_at IS NOT NULL \(unsafeRaw: latest))
                  END, \(never)),
                -- The grace end stated by the latest billing issue of the current period keeps
                -- access, even when a later notice of the same failure states none (SPEC §5).
                COALESCE((SELECT p.grace_expires_at FROM billing_events p
                          WHERE p.environment = \(env) AND p.subscription_id = z.subscription_id AND p.intrinsic_at < \(t)
                            AND \(unsafeRaw: counted("p")) AND p.kind = 'billing_issue' AND p.grace_expires_at IS NOT NULL
                            AND (pe.id IS NULL OR p.intrinsic_at > pe.intrinsic_at OR (p.intrinsic_at = pe.intrinsic_at AND p.id > pe.id))
                          \(unsafeRaw: latest)),
                         \(never))) > \(t)
            """
    }
}
