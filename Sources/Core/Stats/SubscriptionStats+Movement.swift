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
    /// or at the end, its two sides met in `instants`' stream (sorted by subscription) and
    /// kept as a count per distinct pair of sides, so that the rates can be read after the
    /// stream and each distinct term is converted once. Per subscription, with m₀ and m₁ its
    /// monthly amount at the start and at the end (each converted at its own period's
    /// purchase day):
    /// - only at the end: `new` m₁, or `reactivation` when it paid before `from`;
    /// - only at the start: `churned` −m₀;
    /// - at both: its end price converted at the start's purchase day minus m₀ is
    ///   `expansion` (> 0) or `contraction` (< 0); the rest of m₁ − m₀ is what the rates
    ///   moved (`fx`).
    /// A side without a rate counts 0, as in the snapshot's MRR (its `unconverted`); what
    /// appears or vanishes with a rate is `fx`. `fx` is computed last as the difference, so
    /// it also carries the rounding of the totals (below a milli-unit per currency, day and
    /// product) and the sum is exact.
    struct MovementPairs {
        /// A paying side: what its monthly amount depends on.
        struct Side: Hashable {
            var product: String?
            var currency: String
            var day: RateDay
            var price: Int64
        }
        /// Indexes into `sides` (−1: none), and whether a subscription paying only at the end
        /// paid before the period.
        struct Pair: Hashable {
            var before: Int32
            var after: Int32
            var paidBefore: Bool
        }
        private var sides: [Side] = []
        private var sideIndex: [Side: Int32] = [:]
        private(set) var pairs: [Pair: Int64] = [:]
        /// The subscription being streamed and its paying sides so far.
        private var subscription: String?
        private var before: Side?
        private var after: (side: Side, paidBefore: Bool)?

        /// Adds a state; states of one subscription come one after the other.
        mutating func add(_ s: ActiveState) {
            if s.subscriptionId != subscription {
                finish()
                subscription = s.subscriptionId
            }
            guard s.paid, let price = s.priceMilli, let day = s.paidDay else { return }
            let side = Side(product: s.productId, currency: s.currency ?? "XXX", day: day, price: price)
            if s.atStart { before = side }
            if s.atEnd { after = (side, s.paidBefore) }
        }

        /// Counts the subscription being streamed.
        mutating func finish() {
            defer {
                before = nil
                after = nil
            }
            guard before != nil || after != nil else { return }
            let pair = Pair(
                before: before.map { index($0) } ?? -1, after: after.map { index($0.side) } ?? -1,
                paidBefore: before == nil && after?.paidBefore == true)
            pairs[pair, default: 0] += 1
        }

        private mutating func index(_ side: Side) -> Int32 {
            if let known = sideIndex[side] { return known }
            let n = Int32(sides.count)
            sides.append(side)
            sideIndex[side] = n
            return n
        }

        func movement(start: Snapshot, end: Snapshot, currency: String, rates: ExchangeRates) -> Movement {
            var startCadence: [String?: Cadence] = [:]
            var endCadence: [String?: Cadence] = [:]
            for p in start.products { startCadence[p.productId] = p.cadence }
            for p in end.products { endCadence[p.productId] = p.cadence }
            let scale = movementScale
            /// A side's monthly amount ×scale; 0 for a product without a cadence (as in MRR),
            /// nil without a rate.
            func monthly(_ s: Side, cadence: Cadence?, at day: RateDay) -> Int128? {
                guard let cadence else { return 0 }
                guard s.currency != "XXX" else { return nil }
                return rates.convertScaled(s.price, from: s.currency, to: currency, on: day, times: monthlyFactor(cadence), scale: scale)
            }
            var sums = (new: Int128(0), expansion: Int128(0), contraction: Int128(0), churned: Int128(0), reactivation: Int128(0))
            var m = Movement()
            for (pair, count) in pairs {
                let n = Int128(count)
                let before = pair.before >= 0 ? sides[Int(pair.before)] : nil
                let after = pair.after >= 0 ? sides[Int(pair.after)] : nil
                // m₀, m₁: nil without a rate (that side is in `unconverted`, not in MRR).
                let m0 = before.flatMap { monthly($0, cadence: startCadence[$0.product], at: $0.day) }
                let m1 = after.flatMap { monthly($0, cadence: endCadence[$0.product], at: $0.day) }
                if let m0, m0 != 0 { m.counts.atStart += count }
                switch (before, after) {
                case (nil, _?):
                    guard let m1, m1 != 0 else { continue }
                    if pair.paidBefore {
                        sums.reactivation += m1 * n
                        m.counts.reactivation += count
                    } else {
                        sums.new += m1 * n
                        m.counts.new += count
                    }
                case (_?, nil):
                    guard let m0, m0 != 0 else { continue }
                    sums.churned -= m0 * n
                    m.counts.churned += count
                case (let b?, let a?):
                    guard let m0, let m1 else { continue }  // a side without a rate: all of it is fx
                    let atStartRate = monthly(a, cadence: endCadence[a.product], at: b.day) ?? m1
                    let change = atStartRate - m0
                    if change > 0 {
                        sums.expansion += change * n
                        m.counts.expansion += count
                    } else if change < 0 {
                        sums.contraction += change * n
                        m.counts.contraction += count
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
}
