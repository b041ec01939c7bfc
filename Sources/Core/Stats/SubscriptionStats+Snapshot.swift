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

    /// One stored state active at the start or the end of the period (or both: one row
    /// serves both sides), as `instants` reads it.
    struct ActiveState {
        var atStart: Bool
        var atEnd: Bool
        var subscriptionId: String
        var productId: String?
        var currency: String?
        /// The UTC day its period was bought: the day its price converts at.
        var paidDay: RateDay?
        var priceMilli: Int64?
        var isTrial: Bool
        var familyShared: Bool
        var cancelling: Bool
        var periodSeconds: Int64?
        /// Its subscription's first paid sale came before the period (MRR reactivation).
        var paidBefore: Bool

        /// It pays (`SubscriptionStates.paid`): not a trial, not family-shared, priced.
        var paid: Bool { !isTrial && !familyShared && (priceMilli ?? 0) > 0 }

        /// The state's columns the reads select (alias s).
        static let columns = """
            s.subscription_id, s.product_id, s.currency, DATE(s.paid_at) AS paid_day, s.price_milli,
              s.is_trial, s.family_shared, s.cancelling, s.period_seconds
            """

        init(row: SQLRow, atStart: Bool, atEnd: Bool, paidBefore: Bool) throws(DatabaseError) {
            self.atStart = atStart
            self.atEnd = atEnd
            subscriptionId = try row.string("subscription_id")
            productId = try row.optionalString("product_id")
            currency = try row.optionalString("currency")
            paidDay = try row.optionalTimestamp("paid_day").map(RateDay.init)
            priceMilli = try row.optionalInt64("price_milli")
            isTrial = try row.bool("is_trial")
            familyShared = try row.bool("family_shared")
            cancelling = try row.bool("cancelling")
            periodSeconds = try row.optionalInt64("period_seconds")
            self.paidBefore = paidBefore
        }
    }

    /// One snapshot as its states stream in: per product, the counts, the paying prices by
    /// currency and purchase day (converted once each, when it is finished), and the
    /// periods' lengths (a product's cadence when the catalog does not name it).
    struct SnapshotSums {
        struct Product {
            var counts = ProductSnapshot(productId: nil, active: 0, trial: 0, cancelling: 0, familyShared: 0, mrrMilli: 0)
            var prices = CurrencyAmounts()
            var priced: [String: Int64] = [:]
            var periodSeconds: Int64 = 0
            var periods: Int64 = 0
        }
        private(set) var products: [String?: Product] = [:]

        /// The paying prices of every product: the currencies and days to convert at.
        var prices: CurrencyAmounts { products.values.reduce(into: CurrencyAmounts()) { $0.add($1.prices) } }

        mutating func add(_ s: ActiveState) {
            // In place (the dictionary's modify accessor): a copy taken out and written back
            // would copy the product's price sums at every row.
            Self.add(s, to: &products[s.productId, default: Product()])
        }

        private static func add(_ s: ActiveState, to p: inout Product) {
            p.counts.active += 1
            if s.isTrial { p.counts.trial += 1 }
            if s.cancelling { p.counts.cancelling += 1 }
            if !s.isTrial && s.familyShared { p.counts.familyShared += 1 }
            if let seconds = s.periodSeconds {
                p.periodSeconds = Money.add(p.periodSeconds, seconds)
                p.periods += 1
            }
            if s.paid, let price = s.priceMilli, let day = s.paidDay {
                let currency = s.currency ?? "XXX"
                p.prices.add(price, currency: currency, day: day)
                p.priced[currency, default: 0] += 1
            }
        }

        /// The snapshot: each product's cadence (the catalog's, else from the mean length of
        /// its periods), its paying prices converted at their days' rates and made monthly,
        /// and what had no rate; products in the order of their ids' bytes, none first.
        func snapshot(at t: Timestamp, currency: String, rates: ExchangeRates, cadence: (String) -> Cadence?) -> Snapshot {
            let ordered = products.sorted { a, b in
                guard let x = a.key else { return b.key != nil }
                guard let y = b.key else { return false }
                return x.utf8.lexicographicallyPrecedes(y.utf8)
            }
            var snapshots: [ProductSnapshot] = []
            for (productId, var p) in ordered {
                p.counts.productId = productId
                let periodDays = p.periods > 0 ? Double(p.periodSeconds) / Double(p.periods) / 86_400 : nil
                p.counts.cadence = productId.flatMap(cadence) ?? periodDays.map { SubscriptionStats.cadence(periodDays: $0) }
                let converted = p.prices.converted(to: currency, with: rates)
                p.counts.mrrMilli = p.counts.cadence.map { monthly(converted.milli, $0) } ?? 0
                for (code, milli) in converted.unconverted {
                    p.counts.unconverted[code] = (p.priced[code] ?? 0, p.counts.cadence.map { monthly(milli, $0) } ?? 0)
                }
                snapshots.append(p.counts)
            }
            return Snapshot(at: t, products: snapshots)
        }
    }

    /// The subscriptions active at the period's start and at `snapshotAt`, from their
    /// stored states (`SubscriptionStates`: the state after the latest counted event before
    /// the instant), read once (`forEachActiveState`) and sorted by subscription so that its
    /// two sides meet. Each row adds to its snapshots' sums and its paying sides to the MRR
    /// movement's pairs; the rates are read once, for every currency and day either needs.
    static func instants(
        _ q: Query, snapshotAt: Timestamp, cadence: (String) -> Cadence?, on db: DatabaseConnection
    ) throws -> (start: Snapshot, end: Snapshot, movement: Movement) {
        var start = SnapshotSums()
        var end = SnapshotSums()
        var pairs = MovementPairs()
        try forEachActiveState(environment: q.environment.rawValue, at: q.from, and: snapshotAt, bySubscription: true, on: db) { state in
            if state.atStart { start.add(state) }
            if state.atEnd { end.add(state) }
            pairs.add(state)
        }
        pairs.finish()
        var wanted = start.prices
        wanted.add(end.prices)
        let rates = try ratesFor(wanted, currency: q.currency, on: db)
        let startSnapshot = start.snapshot(at: q.from, currency: q.currency, rates: rates, cadence: cadence)
        let endSnapshot = end.snapshot(at: snapshotAt, currency: q.currency, rates: rates, cadence: cadence)
        let movement = pairs.movement(start: startSnapshot, end: endSnapshot, currency: q.currency, rates: rates)
        return (startSnapshot, endSnapshot, movement)
    }

    /// The subscriptions active at each of `instants` (`stats.snapshots`), in the order asked
    /// (an instant named twice, twice): one read of every instant's states
    /// (`forEachActiveState(at:)`), each state added to the sums of the instants it is active
    /// at, and the rates read once for all of them.
    static func snapshots(
        at instants: [Timestamp], environment env: String, currency: String,
        cadence: (String) -> Cadence?, on db: DatabaseConnection
    ) throws -> [Snapshot] {
        let distinct = Array(Set(instants)).sorted()
        var sums = [SnapshotSums](repeating: SnapshotSums(), count: distinct.count)
        try forEachActiveState(environment: env, at: distinct, on: db) { state, active in
            for i in active { sums[i].add(state) }
        }
        let rates = try ratesFor(sums.reduce(into: CurrencyAmounts()) { $0.add($1.prices) }, currency: currency, on: db)
        var byInstant: [Timestamp: Snapshot] = [:]
        for (t, s) in zip(distinct, sums) { byInstant[t] = s.snapshot(at: t, currency: currency, rates: rates, cadence: cadence) }
        return instants.map { byInstant[$0]! }
    }

    /// The rates of every currency and day in `amounts`, and of the reporting currency.
    private static func ratesFor(_ amounts: CurrencyAmounts, currency: String, on db: DatabaseConnection) throws -> ExchangeRates {
        try amounts.days.map { try ExchangeRates.load(currencies: amounts.currencies.union([currency]), days: $0, on: db) }
            ?? ExchangeRates()
    }

    /// Every state active at `start` or at `end` (or both: one row, both sides), in one range
    /// scan of the primary key over both instants' ranges (`SubscriptionStates.classRanges`),
    /// by subscription when asked; streamed from the server (`streamRows`), one row in memory.
    static func forEachActiveState(
        environment env: String, at start: Timestamp, and end: Timestamp, bySubscription: Bool, on db: DatabaseConnection,
        _ body: (ActiveState) -> Void
    ) throws(DatabaseError) {
        let window = SubscriptionStates.activeWindow(at:)
        let windows: SQLQuery = start == end ? window(start) : "(\(window(start)) OR \(window(end)))"
        try db.streamRows(
            """
            SELECT (s.valid_from < \(start) AND s.active_until > \(start)) AS at_start,
              (s.valid_from < \(end) AND s.active_until > \(end)) AS at_end,
              \(unsafeRaw: ActiveState.columns), (s.first_paid_at < \(start)) AS paid_before
            FROM billing_subscription_states s
            WHERE s.environment = \(env) AND \(windows)
            \(unsafeRaw: bySubscription ? "ORDER BY s.subscription_id" : "")
            """
        ) { (row: SQLRow) throws(DatabaseError) in
            body(
                try ActiveState(
                    row: row, atStart: try row.bool("at_start"), atEnd: try row.bool("at_end"),
                    paidBefore: try row.optionalInt64("paid_before") == 1))
        }
    }

    /// Every state active at one or more of `instants` (sorted, distinct), once, with the
    /// indexes of the instants it is active at: per length class, range scans of the primary
    /// key over every instant's windows merged where they overlap, in pieces of about a month
    /// of states (`classRanges(at:spanClass:)`), streamed. A state is active from just after
    /// `valid_from` to just before `active_until`, so the instants it is active at are
    /// consecutive: found by a binary search, and a state of the ranges active at none of them
    /// is passed over. (One statement with an OR of every instant's window was exact, but
    /// MariaDB checked its hundreds of terms on every row: 31 daily instants over a month of
    /// states at 10M events outlasted the 9.5 s limit.) (`atStart`, `atEnd` and `paidBefore`
    /// are not read: false.)
    static func forEachActiveState(
        environment env: String, at instants: [Timestamp], on db: DatabaseConnection,
        _ body: (ActiveState, Range<Int>) -> Void
    ) throws(DatabaseError) {
        guard let first = instants.first else { return }
        for c in 0...SubscriptionStates.unboundedClass {
            for ranges in SubscriptionStates.classRanges(at: instants, spanClass: c) {
                try db.streamRows(
                    """
                    SELECT s.valid_from, s.active_until, \(unsafeRaw: ActiveState.columns)
                    FROM billing_subscription_states s
                    WHERE s.environment = \(env) AND \(ranges) AND s.active_until > \(first)
                    """
                ) { (row: SQLRow) throws(DatabaseError) in
                    let validFrom = try row.timestamp("valid_from")
                    let activeUntil = try row.timestamp("active_until")
                    let from = instants.partitioningIndex { $0 > validFrom }
                    let to = instants[from...].partitioningIndex { $0 >= activeUntil }
                    guard from < to else { return }
                    body(try ActiveState(row: row, atStart: false, atEnd: false, paidBefore: false), from..<to)
                }
            }
        }
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
