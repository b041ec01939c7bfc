extension SubscriptionStats {
    // MARK: - Snapshot at an instant

    struct ProductSnapshot {
        var productId: String?
        var active: Int64
        var trial: Int64
        var cancelling: Int64
        /// Family-shared subscriptions with access (not trials): access, but no payer.
        var familyShared: Int64
        var mrrMilli: Int64
        var cadence: Cadence?
    }

    struct Snapshot {
        var at: Timestamp
        var products: [ProductSnapshot]
        var active: Int64 { products.reduce(0) { $0 + $1.active } }
        var trial: Int64 { products.reduce(0) { $0 + $1.trial } }
        var familyShared: Int64 { products.reduce(0) { $0 + $1.familyShared } }
        var paying: Int64 { active - trial - familyShared }
        var cancelling: Int64 { products.reduce(0) { $0 + $1.cancelling } }
        var mrrMilli: Int64 { products.reduce(0) { Money.add($0, $1.mrrMilli) } }

        var json: JSON {
            [
                "at": .string(at.iso8601),
                "active": .int(active), "trial": .int(trial), "paying": .int(paying), "familyShared": .int(familyShared),
                "cancelling": .int(cancelling), "mrrMilli": .int(mrrMilli),
                "byProduct": .array(
                    products.map { p in
                        [
                            "productId": p.productId.map(JSON.string) ?? .null,
                            "active": .int(p.active), "trial": .int(p.trial), "paying": .int(p.active - p.trial - p.familyShared),
                            "familyShared": .int(p.familyShared),
                            "cancelling": .int(p.cancelling), "mrrMilli": .int(p.mrrMilli),
                            "cadence": p.cadence.map { .string($0.rawValue) } ?? .null,
                        ]
                    }),
            ]
        }
    }

    /// The state at `t` of every subscription, from its events with intrinsic_at < t:
    /// only subscriptions with an event before t whose access (expiry or grace) runs past t
    /// can be active, so those are the candidates (covering index on expires_at); for each,
    /// LIMIT 1 lookups in the covering per-subscription index find the latest event, the
    /// latest period start and the latest renewal intent before t; the two rows whose
    /// product and price matter are then read by primary key.
    static func snapshot(
        at t: Timestamp, environment env: String, currency: String,
        cadence: (String) -> Cadence?, on db: DatabaseConnection
    ) throws -> Snapshot {
        let latest = "ORDER BY p.intrinsic_at DESC, p.id DESC LIMIT 1"
        let sameSubscription: SQLQuery = """
            p.environment = \(env) AND p.subscription_id = s.subscription_id AND p.intrinsic_at < \(t) AND \(unsafeRaw: counted("p"))
            """
        let trial = "COALESCE(pe.is_trial, le.is_trial)"
        let shared = "COALESCE(pe.family_shared, le.family_shared)"
        // A refund or revocation of a period older than the latest period start takes back
        // that period only: the later one stands (SPEC §5).
        let earlierRefund = "(le.kind IN ('refund', 'revoke') AND pe.purchased_at IS NOT NULL AND le.purchased_at < pe.purchased_at)"
        let never = Timestamp(millisecondsSinceEpoch: 0)
        let rows = try db.query(
            """
            SELECT COALESCE(pe.product_id, le.product_id) AS product_id,
              COUNT(*) AS active,
              SUM(\(unsafeRaw: trial) = 1) AS trial,
              SUM(COALESCE(z.cancelling, 0)) AS cancelling,
              SUM(\(unsafeRaw: trial) = 0 AND \(unsafeRaw: shared) = 1) AS family_shared,
              CAST(LEAST(SUM(CASE WHEN \(unsafeRaw: trial) = 0 AND \(unsafeRaw: shared) = 0 AND pe.currency = \(currency)
                                   AND pe.price_milli > 0 THEN pe.price_milli ELSE 0 END), 9223372036854775807) AS SIGNED) AS price_sum,
              AVG(CASE WHEN \(unsafeRaw: trial) = 0 AND pe.expires_at > pe.purchased_at
                  THEN TIMESTAMPDIFF(SECOND, pe.purchased_at, pe.expires_at) END) / 86400 AS period_days
            FROM (
              -- LIMIT: never merged (see dailyCounts).
              SELECT s.subscription_id,
                (SELECT p.id FROM billing_events p WHERE \(sameSubscription) \(unsafeRaw: latest)) AS last_id,
                (SELECT p.id FROM billing_events p WHERE \(sameSubscription) AND \(unsafeRaw: periodStart("p"))
                  \(unsafeRaw: latest)) AS period_id,
                (SELECT (p.will_renew = 0 OR (p.will_renew IS NULL AND p.kind IN ('cancellation', 'pause')))
                  FROM billing_events p WHERE \(sameSubscription)
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
            GROUP BY COALESCE(pe.product_id, le.product_id)
            ORDER BY product_id
            """)
        var products: [ProductSnapshot] = []
        for row in rows {
            let productId = try row.optionalString("product_id")
            let priceSum = try row.int64("price_sum")
            let periodDays = try row.optionalDouble("period_days")
            let productCadence = productId.flatMap(cadence) ?? periodDays.map { self.cadence(periodDays: $0) }
            let mrr = productCadence.map { Money.milli(Double(priceSum) * monthlyFactor($0)) } ?? 0
            products.append(
                ProductSnapshot(
                    productId: productId, active: try row.int64("active"), trial: try row.int64("trial"),
                    cancelling: try row.int64("cancelling"), familyShared: try row.int64("family_shared"),
                    mrrMilli: mrr,
                    cadence: productCadence))
        }
        return Snapshot(at: t, products: products)
    }

}
