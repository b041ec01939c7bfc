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
        /// The MRR of subscriptions whose price has no rate, per currency, in that currency.
        var unconverted: [String: (subscriptions: Int64, mrrMilli: Int64)] = [:]
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
        /// Paying subscriptions whose owners are known users, counted once per user, and
        /// those of them not seen in the report's period (`SubscriptionStats.payingUsers`).
        /// The paying prices in their currencies by purchase day, all products together: the
        /// currencies and days whose rates the snapshot (and the MRR movement) converts at.
        var prices = CurrencyAmounts()

        /// Per currency without a rate: its subscriptions and their MRR in that currency.
        var unconverted: JSON {
            var merged: [String: (subscriptions: Int64, mrrMilli: Int64)] = [:]
            for p in products {
                for (currency, u) in p.unconverted {
                    let sum = merged[currency] ?? (0, 0)
                    merged[currency] = (sum.subscriptions + u.subscriptions, Money.add(sum.mrrMilli, u.mrrMilli))
                }
            }
            return SubscriptionStats.byCurrencyJSON(merged.mapValues { ["subscriptions": .int($0.subscriptions), "mrrMilli": .int($0.mrrMilli)] })
        }

        var json: JSON {
            [
                "at": .string(at.iso8601),
                "active": .int(active), "trial": .int(trial), "paying": .int(paying), "familyShared": .int(familyShared),
                "cancelling": .int(cancelling), "mrrMilli": .int(mrrMilli), "unconverted": unconverted,
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
    /// product and price matter are then read by primary key. MariaDB sums the paying
    /// prices per product, currency and purchase day; each sum is converted here at that
    /// day's rate (`ExchangeRates`), then each product's converted sum is made monthly.
    static func snapshot(
        at t: Timestamp, environment env: String, currency: String,
        cadence: (String) -> Cadence?, on db: DatabaseConnection
    ) throws -> Snapshot {
        let active = activeSubscriptions(at: t, environment: env)
        struct Product {
            var counts = ProductSnapshot(productId: nil, active: 0, trial: 0, cancelling: 0, familyShared: 0, mrrMilli: 0)
            var prices = CurrencyAmounts()
            var priced: [String: Int64] = [:]
            var periodSeconds: Int64 = 0
            var periods: Int64 = 0
        }
        var products: [Product] = []
        try db.forEachRow(
            """
            SELECT COALESCE(pe.product_id, le.product_id) AS product_id,
              CASE WHEN \(unsafeRaw: paidPeriod) THEN COALESCE(pe.currency, 'XXX') END AS paid_currency,
              CASE WHEN \(unsafeRaw: paidPeriod) THEN DATE(COALESCE(pe.purchased_at, pe.intrinsic_at)) END AS paid_day,
              COUNT(*) AS active,
              SUM(\(unsafeRaw: isTrial) = 1) AS trial,
              SUM(COALESCE(z.cancelling, 0)) AS cancelling,
              SUM(\(unsafeRaw: isTrial) = 0 AND \(unsafeRaw: isShared) = 1) AS family_shared,
              CAST(LEAST(SUM(CASE WHEN \(unsafeRaw: paidPeriod) THEN pe.price_milli ELSE 0 END), 9223372036854775807) AS SIGNED) AS price_sum,
              CAST(SUM(CASE WHEN \(unsafeRaw: isTrial) = 0 AND pe.expires_at > pe.purchased_at
                  THEN TIMESTAMPDIFF(SECOND, pe.purchased_at, pe.expires_at) ELSE 0 END) AS SIGNED) AS period_seconds,
              SUM(CASE WHEN \(unsafeRaw: isTrial) = 0 AND pe.expires_at > pe.purchased_at THEN 1 ELSE 0 END) AS periods
            \(active)
            GROUP BY COALESCE(pe.product_id, le.product_id), paid_currency, paid_day
            ORDER BY product_id
            """
        ) { (row: SQLRow) throws(DatabaseError) in
            let productId = try row.optionalString("product_id")
            if products.last.map({ $0.counts.productId != productId }) ?? true {
                var fresh = Product()
                fresh.counts.productId = productId
                products.append(fresh)
            }
            let n = products.count - 1
            products[n].counts.active += try row.int64("active")
            products[n].counts.trial += try row.int64("trial")
            products[n].counts.cancelling += try row.int64("cancelling")
            products[n].counts.familyShared += try row.int64("family_shared")
            products[n].periodSeconds = Money.add(products[n].periodSeconds, try row.int64("period_seconds"))
            products[n].periods += try row.int64("periods")
            if let paid = try row.optionalString("paid_currency"), let day = try row.optionalTimestamp("paid_day") {
                products[n].prices.add(try row.int64("price_sum"), currency: paid, day: RateDay(day))
                products[n].priced[paid, default: 0] += try row.int64("active")
            }
        }
        let wanted = products.reduce(into: CurrencyAmounts()) { $0.add($1.prices) }
        let rates = try wanted.days.map { try ExchangeRates.load(currencies: wanted.currencies.union([currency]), days: $0, on: db) }
        var snapshots: [ProductSnapshot] = []
        for var p in products {
            let periodDays = p.periods > 0 ? Double(p.periodSeconds) / Double(p.periods) / 86_400 : nil
            p.counts.cadence = p.counts.productId.flatMap(cadence) ?? periodDays.map { self.cadence(periodDays: $0) }
            let converted = p.prices.converted(to: currency, with: rates ?? ExchangeRates())
            p.counts.mrrMilli = p.counts.cadence.map { monthly(converted.milli, $0) } ?? 0
            for (code, milli) in converted.unconverted {
                p.counts.unconverted[code] = (p.priced[code] ?? 0, p.counts.cadence.map { monthly(milli, $0) } ?? 0)
            }
            snapshots.append(p.counts)
        }
        return Snapshot(at: t, products: snapshots, prices: wanted)
    }

    /// The paying subscriptions active at `t` whose owner is a known user, as users: how
    /// many, and how many of them were not seen in [from, to) (`billing_user_days`). Paying
    /// % counts them among the users active in the period, the paying counted as active.
    static func payingUsers(
        at t: Timestamp, environment env: String, from: Timestamp, to: Timestamp, on db: DatabaseConnection
    ) throws -> (users: Int64, unseen: Int64) {
        let row = try db.queryOne(
            """
            SELECT COUNT(*) AS users,
              SUM(NOT EXISTS (SELECT 1 FROM billing_user_days d WHERE d.user_id = u.user_id
                                AND d.day >= DATE(\(from)) AND d.day <= DATE(\(to.adding(milliseconds: -1))))) AS unseen
            FROM (SELECT DISTINCT le.user_id \(activeSubscriptions(at: t, environment: env))
                    AND \(unsafeRaw: isTrial) = 0 AND \(unsafeRaw: isShared) = 0 AND le.user_id IS NOT NULL
                  LIMIT 18446744073709551615) u
            """)
        return (try row?.int64("users") ?? 0, try row?.optionalInt64("unseen") ?? 0)
    }

    /// A period price as a month of it: × the cadence's monthly factor, rounded once.
    static func monthly(_ milli: Int64, _ cadence: Cadence) -> Int64 {
        let factor = monthlyFactor(cadence)
        return Money.dividedRounded(Int128(milli) * Int128(factor.numerator), by: Int128(factor.denominator))
    }

    static let isTrial = "COALESCE(pe.is_trial, le.is_trial)"
    static let isShared = "COALESCE(pe.family_shared, le.family_shared)"
    /// A subscription that pays: not a trial, not family-shared, its period priced.
    static let paidPeriod = "(\(isTrial) = 0 AND \(isShared) = 0 AND pe.price_milli > 0)"

    /// `FROM … WHERE …` of the subscriptions active at `t`: `z` (the subscription, whether its
    /// renewal is off), `le` its latest event and `pe` its latest period start before t.
    static func activeSubscriptions(at t: Timestamp, environment env: String) -> SQLQuery {
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
