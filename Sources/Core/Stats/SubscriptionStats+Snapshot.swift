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

    /// The subscriptions active at `t`, from their stored states (`SubscriptionStates`: the
    /// state after the latest counted event before t). MariaDB sums the paying prices per
    /// product, currency and purchase day; each sum is converted here at that day's rate
    /// (`ExchangeRates`), then each product's converted sum is made monthly.
    static func snapshot(
        at t: Timestamp, environment env: String, currency: String,
        cadence: (String) -> Cadence?, on db: DatabaseConnection
    ) throws -> Snapshot {
        let active = SubscriptionStates.active(at: t, environment: env)
        let paid = SubscriptionStates.paid
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
            SELECT s.product_id,
              CASE WHEN \(unsafeRaw: paid) THEN COALESCE(s.currency, 'XXX') END AS paid_currency,
              CASE WHEN \(unsafeRaw: paid) THEN DATE(s.paid_at) END AS paid_day,
              COUNT(*) AS active, SUM(s.is_trial) AS trial, SUM(s.cancelling) AS cancelling,
              SUM(s.is_trial = 0 AND s.family_shared = 1) AS family_shared,
              CAST(LEAST(SUM(CASE WHEN \(unsafeRaw: paid) THEN s.price_milli ELSE 0 END), 9223372036854775807) AS SIGNED) AS price_sum,
              CAST(COALESCE(SUM(s.period_seconds), 0) AS SIGNED) AS period_seconds, COUNT(s.period_seconds) AS periods
            \(active)
            GROUP BY s.product_id, paid_currency, paid_day
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
    /// The users are told apart by sorting (SQL_BIG_RESULT), not through a temporary table
    /// keyed by user, which spills to disk at scale (4x slower, docs/performance.md).
    static func payingUsers(
        at t: Timestamp, environment env: String, from: Timestamp, to: Timestamp, on db: DatabaseConnection
    ) throws -> (users: Int64, unseen: Int64) {
        let row = try db.queryOne(
            """
            SELECT COUNT(*) AS users,
              SUM(NOT EXISTS (SELECT 1 FROM billing_user_days d WHERE d.user_id = u.user_id
                                AND d.day >= DATE(\(from)) AND d.day <= DATE(\(to.adding(milliseconds: -1))))) AS unseen
            FROM (SELECT SQL_BIG_RESULT s.user_id \(SubscriptionStates.active(at: t, environment: env))
                    AND s.is_trial = 0 AND s.family_shared = 0 AND s.user_id IS NOT NULL
                  GROUP BY s.user_id LIMIT 18446744073709551615) u
            """)
        return (try row?.int64("users") ?? 0, try row?.optionalInt64("unseen") ?? 0)
    }

    /// A period price as a month of it: × the cadence's monthly factor, rounded once.
    static func monthly(_ milli: Int64, _ cadence: Cadence) -> Int64 {
        let factor = monthlyFactor(cadence)
        return Money.dividedRounded(Int128(milli) * Int128(factor.numerator), by: Int128(factor.denominator))
    }
}
