extension SubscriptionStats {
    // MARK: - MRR movement between the two snapshots

    /// Where MRR went between the start and the end snapshot (docs/stats.md, "MRR
    /// movement"), per subscription, in milli-units of the reporting currency; the six
    /// amounts sum to end MRR − start MRR exactly.
    struct Movement: Sendable, Equatable {
        var new: Int64 = 0
        var expansion: Int64 = 0
        var contraction: Int64 = 0
        var churned: Int64 = 0
        var reactivation: Int64 = 0
        var fx: Int64 = 0
        /// Subscriptions per kind of movement, and those paying with a price at the start
        /// (the churn rate's denominator).
        var counts = Counts()

        struct Counts: Sendable, Equatable {
            var atStart: Int64 = 0
            var new: Int64 = 0, expansion: Int64 = 0, contraction: Int64 = 0, churned: Int64 = 0, reactivation: Int64 = 0
        }

        var json: JSON {
            [
                "new": .int(new), "expansion": .int(expansion), "contraction": .int(contraction), "churned": .int(churned),
                "reactivation": .int(reactivation), "fx": .int(fx),
                "subscriptions": [
                    "atStart": .int(counts.atStart), "new": .int(counts.new), "expansion": .int(counts.expansion),
                    "contraction": .int(counts.contraction), "churned": .int(counts.churned),
                    "reactivation": .int(counts.reactivation),
                ],
            ]
        }
    }

    /// Sub-milli precision of the per-subscription terms: each is exact to 10⁻⁶ milli-units,
    /// and each of the five sums is rounded once.
    static let movementScale: Int64 = 1_000_000

    /// Every subscription that pays (a price, not a trial, not family-shared) at the start
    /// or at the end, with both sides in one row: one scan of the two snapshots' sets in
    /// MariaDB, streamed here. Per subscription, with m₀ and m₁ its monthly amount at the
    /// start and at the end (each converted at its own period's purchase day):
    /// - only at the end: `new` m₁, or `reactivation` when it paid before `from`;
    /// - only at the start: `churned` −m₀;
    /// - at both: its end price converted at the start's purchase day minus m₀ is
    ///   `expansion` (> 0) or `contraction` (< 0); the rest of m₁ − m₀ is what the rates
    ///   moved (`fx`).
    /// A side without a rate counts 0, as in the snapshot's MRR (its `unconverted`); what
    /// appears or vanishes with a rate is `fx`. `fx` is computed last as the difference, so
    /// it also carries the rounding of the totals (below a milli-unit per currency, day and
    /// product) and the sum is exact.
    static func movement(
        _ q: Query, snapshotAt: Timestamp, start: Snapshot, end: Snapshot, on db: DatabaseConnection
    ) throws -> Movement {
        let env = q.environment.rawValue
        var startCadence: [String?: Cadence] = [:]
        var endCadence: [String?: Cadence] = [:]
        for p in start.products { startCadence[p.productId] = p.cadence }
        for p in end.products { endCadence[p.productId] = p.cadence }
        func side(_ n: Int, at t: Timestamp) -> SQLQuery {
            """
            SELECT \(Int64(n)) AS side, s.subscription_id, s.product_id, COALESCE(s.currency, 'XXX') AS currency,
              DATE(s.paid_at) AS day, s.price_milli, s.first_paid_at
            \(SubscriptionStates.active(at: t, environment: env)) AND \(unsafeRaw: SubscriptionStates.paid)
            """
        }
        struct Side {
            var product: String?
            var currency: String
            var day: RateDay
            var price: Int64
        }
        // The rates of every side (the snapshots named their currencies and days), which
        // also serve each end price at its start day.
        var wanted = start.prices
        wanted.add(end.prices)
        let rates =
            try wanted.days.map { try ExchangeRates.load(currencies: wanted.currencies.union([q.currency]), days: $0, on: db) }
            ?? ExchangeRates()
        let scale = movementScale
        /// A side's monthly amount ×scale; 0 for a product without a cadence (as in MRR),
        /// nil without a rate.
        func monthly(_ s: Side, cadence: Cadence?, at day: RateDay) -> Int128? {
            guard let cadence else { return 0 }
            guard s.currency != "XXX" else { return nil }
            return rates.convertScaled(s.price, from: s.currency, to: q.currency, on: day, times: monthlyFactor(cadence), scale: scale)
        }
        var sums = (new: Int128(0), expansion: Int128(0), contraction: Int128(0), churned: Int128(0), reactivation: Int128(0))
        var m = Movement()
        try db.forEachRow(
            // SQL_BIG_RESULT: grouped by sorting (one pass over both sets), not through a
            // temporary table keyed by subscription, which spills to disk and was 3-5x
            // slower (docs/performance.md, "At 10M events").
            """
            SELECT SQL_BIG_RESULT m.subscription_id,
              MAX(CASE WHEN m.side = 0 THEN 1 ELSE 0 END) AS at_start, MAX(CASE WHEN m.side = 1 THEN 1 ELSE 0 END) AS at_end,
              MAX(CASE WHEN m.side = 0 THEN m.product_id END) AS product0, MAX(CASE WHEN m.side = 1 THEN m.product_id END) AS product1,
              MAX(CASE WHEN m.side = 0 THEN m.currency END) AS currency0, MAX(CASE WHEN m.side = 1 THEN m.currency END) AS currency1,
              MAX(CASE WHEN m.side = 0 THEN m.day END) AS day0, MAX(CASE WHEN m.side = 1 THEN m.day END) AS day1,
              MAX(CASE WHEN m.side = 0 THEN m.price_milli END) AS price0, MAX(CASE WHEN m.side = 1 THEN m.price_milli END) AS price1,
              (MIN(m.side) = 1 AND MAX(m.first_paid_at) < \(q.from)) AS paid_before
            FROM (\(side(0, at: q.from)) UNION ALL \(side(1, at: snapshotAt))) m
            GROUP BY m.subscription_id
            """
        ) { (row: SQLRow) throws(DatabaseError) in
            func read(_ n: Int) throws(DatabaseError) -> Side? {
                guard try row.bool(n == 0 ? "at_start" : "at_end") else { return nil }
                return Side(
                    product: try row.optionalString("product\(n)"), currency: try row.string("currency\(n)"),
                    day: RateDay(try row.timestamp("day\(n)")), price: try row.int64("price\(n)"))
            }
            let before = try read(0)
            let after = try read(1)
            // m₀, m₁: nil without a rate (that side is in `unconverted`, not in MRR).
            let m0 = before.flatMap { monthly($0, cadence: startCadence[$0.product], at: $0.day) }
            let m1 = after.flatMap { monthly($0, cadence: endCadence[$0.product], at: $0.day) }
            if let m0, m0 != 0 { m.counts.atStart += 1 }
            switch (before, after) {
            case (nil, _?):
                guard let m1, m1 != 0 else { return }
                if try row.optionalInt64("paid_before") == 1 {
                    sums.reactivation += m1
                    m.counts.reactivation += 1
                } else {
                    sums.new += m1
                    m.counts.new += 1
                }
            case (_?, nil):
                guard let m0, m0 != 0 else { return }
                sums.churned -= m0
                m.counts.churned += 1
            case (let b?, let a?):
                guard let m0, let m1 else { return }  // a side without a rate: all of it is fx
                let atStartRate = monthly(a, cadence: endCadence[a.product], at: b.day) ?? m1
                let change = atStartRate - m0
                if change > 0 {
                    sums.expansion += change
                    m.counts.expansion += 1
                } else if change < 0 {
                    sums.contraction += change
                    m.counts.contraction += 1
                }
            case (nil, nil):
                break
            }
        }
        func milli(_ v: Int128) -> Int64 { Money.dividedRounded(v, by: Int128(scale)) }
        m.new = milli(sums.new)
        m.expansion = milli(sums.expansion)
        m.contraction = milli(sums.contraction)
        m.churned = milli(sums.churned)
        m.reactivation = milli(sums.reactivation)
        let explained = [m.new, m.expansion, m.contraction, m.churned, m.reactivation].reduce(0, Money.add)
        m.fx = Money.subtract(Money.subtract(end.mrrMilli, start.mrrMilli), explained)
        return m
    }
}
