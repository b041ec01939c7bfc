/// `stats.subscriptions`: subscription analytics over the normalized inbox of both
/// providers, computed by MariaDB (window functions, aggregates, the indexes of
/// sql/005_stats.sql). Only aggregates cross the wire: per product, per day, per placement.
/// Every definition and formula is in docs/stats.md; keep the two in step.
enum SubscriptionStats {
    /// What the operator asks for.
    struct Query: Sendable, Equatable {
        /// The period [from, to).
        var from: Timestamp
        var to: Timestamp
        var environment: StoreEnvironment
        /// The reporting currency: every amount converts into it (`ExchangeRates`).
        var currency: String
        /// IANA zone (needs MariaDB's time zone tables) or a `+HH:MM` offset for the daily
        /// series; nil = UTC.
        var timeZone: String?

        init(from: Timestamp, to: Timestamp, environment: StoreEnvironment, currency: String, timeZone: String? = nil) {
            self.from = from
            self.to = to
            self.environment = environment
            self.currency = currency
            self.timeZone = timeZone
        }
    }

    /// Longest period accepted (the daily series has one entry per day).
    static let maximumPeriodDays: Int64 = 400
    /// Most instants of one `stats.snapshots` call (each is one snapshot query).
    static let maximumSnapshots = 100
    /// Paywall events are kept this long (then purged).
    static let paywallRetentionDays: Int64 = 30

    enum QueryError: Error, Sendable, Equatable {
        case emptyPeriod
        case periodTooLong
        case unknownTimeZone(String)
    }

    /// Computes the whole report. `cadence` maps a product id to its billing cadence (the
    /// catalog, else wording); unknown products fall back to the length of their period.
    static func compute(
        _ query: Query, now: Timestamp, cadence: (String) -> Cadence?,
        on db: DatabaseConnection
    ) throws -> JSON {
        let length = query.to.millisecondsSinceEpoch - query.from.millisecondsSinceEpoch
        guard length > 0 else { throw QueryError.emptyPeriod }
        guard length <= maximumPeriodDays * 86_400_000 else { throw QueryError.periodTooLong }
        let previousFrom = query.from.adding(milliseconds: -length)
        let zone = try normalizedZone(query.timeZone, on: db)
        // The stored states first take in every inbox change committed before this call.
        try SubscriptionStates.refresh(on: db, now: now)
        let env = query.environment.rawValue
        let snapshotAt = min(query.to, now)

        let (start, end, movement) = try instants(query, snapshotAt: snapshotAt, cadence: cadence, on: db)
        let days = try dailyCounts(query, previousFrom: previousFrom, zone: zone, on: db)
        let current = Counts(summing: days.filter(\.current))
        let previous = Counts(summing: days.filter { !$0.current })
        let seenUsers = try self.activeUsers(from: query.from, to: query.to, on: db)
        let paying = try payingUsers(at: snapshotAt, environment: env, from: query.from, to: query.to, on: db)
        // The paying users count as active even when they did not open the app: the
        // share can reach 100 %, never more.
        let activeUsers = seenUsers + paying.unseen
        let profile = try subscriberProfile(query, on: db)
        let funnelFrom = max(query.from, now.adding(seconds: -paywallRetentionDays * 86_400))
        let funnel = try self.funnel(environment: env, from: funnelFrom, to: query.to, on: db)
        let stages = try self.funnel(environment: env, from: funnelFrom, to: query.to, byStage: true, on: db)
        let series = try dailySeries(query, zone: zone, days: days.filter(\.current), on: db)
        let recent = try recentEvents(environment: env, on: db)

        return [
            "environment": .string(env),
            "currency": .string(query.currency),
            "timeZone": .string(zone ?? "UTC"),
            "period": ["from": .string(query.from.iso8601), "to": .string(query.to.iso8601)],
            "previousPeriod": ["from": .string(previousFrom.iso8601), "to": .string(query.from.iso8601)],
            "snapshots": ["start": start.json, "end": end.json],
            "mrrMovement": movement.json,
            "counts": ["current": current.json, "previous": previous.json],
            "derived": [
                "trialConversionPct": .double(pct(current.converted, current.trials)),
                "previousTrialConversionPct": .double(pct(previous.converted, previous.trials)),
                "activeUsers": .int(activeUsers),
                "seenUsers": .int(seenUsers),
                "payingUsers": .int(paying.users),
                "payingPct": .double(pct(paying.users, activeUsers)),
                "churnRatePct": .double(pct(movement.counts.churned, movement.counts.atStart)),
                "refundRatePct": .double(pct(current.refunds, current.sales)),
                "previousRefundRatePct": .double(pct(previous.refunds, previous.sales)),
            ],
            "subscriberProfile": profile,
            "funnel": [
                "from": .string(funnelFrom.iso8601), "to": .string(query.to.iso8601),
                "retentionDays": .int(paywallRetentionDays),
                "placements": .array(funnel),
                "stages": .array(stages),
            ],
            "series": .array(series),
            "recent": .array(recent),
        ]
    }

    /// `round(100 a / b, 1)`, 0 when b is 0 (half away from zero).
    static func pct(_ a: Int64, _ b: Int64) -> Double {
        guard b != 0 else { return 0 }
        return (Double(a) * 1000 / Double(b)).rounded(.toNearestOrAwayFromZero) / 10
    }

    /// Monthly factor of a cadence as an exact fraction: MRR = period price × factor.
    static func monthlyFactor(_ cadence: Cadence) -> (numerator: Int64, denominator: Int64) {
        switch cadence {
        case .weekly: return (52, 12)
        case .monthly: return (1, 1)
        case .twoMonths: return (1, 2)
        case .quarterly: return (1, 3)
        case .semiannual: return (1, 6)
        case .yearly: return (1, 12)
        case .lifetime, .consumable, .nonRenewing: return (0, 1)
        }
    }

    /// `unconverted`: per currency without a rate (sorted by code), what stayed in it.
    static func byCurrencyJSON(_ byCurrency: [String: JSON]) -> JSON {
        var object = JSONObject()
        for code in byCurrency.keys.sorted() { object[code] = byCurrency[code] }
        return .object(object)
    }

    /// A cadence from the length of a paid period, for products the catalog does not name.
    static func cadence(periodDays days: Double) -> Cadence {
        switch days {
        case ..<11: return .weekly
        case ..<46: return .monthly
        case ..<76: return .twoMonths
        case ..<136: return .quarterly
        case ..<250: return .semiannual
        default: return .yearly
        }
    }

    // MARK: - SQL fragments (trusted constants only)

    /// The events that count: folded or waiting for their user (not ignored/failed), with an
    /// intrinsic time and a subscription id, and a kind that says something about it.
    static func counted(_ a: String) -> String {
        """
        \(a).status IN ('applied', 'unmatched') AND \(a).intrinsic_at IS NOT NULL AND \(a).subscription_id IS NOT NULL \
        AND \(a).kind NOT IN \(notCountedKinds)
        """
    }

    /// Kinds that say nothing about a subscription's period, access or money: tests,
    /// transfers, and the informational types (SPEC §15), even when they carry a transaction.
    static let notCountedKinds =
        "("
        + (["test", "transfer"] + EventKind.allCases.filter(\.isInformational).map(\.rawValue))
        .map { "'\($0)'" }.joined(separator: ", ") + ")"

    /// The index hint of the refresh's read of noted subscriptions' counted events
    /// (`SubscriptionStates.counted(of:from:)`: `WHERE e.environment = … AND e.subscription_id IN
    /// (…) … ORDER BY e.subscription_id, e.intrinsic_at, e.id`): the covering index on
    /// (environment, subscription_id, intrinsic_at, id, …) reads each subscription's events in
    /// order. With persistent statistics (after an `ANALYZE TABLE`) MariaDB 10.11 chose a range
    /// over the environment alone for such lookups instead, every production event read for
    /// every subscription (scripts/bench --scale, docs/performance.md).
    static let perSubscriptionIndex = "FORCE INDEX (billing_events_stats_subscription)"

    /// The kind as the counts read it (docs/stats.md, "Google Play"): a Google Play state is
    /// read from Play itself (what was sold, not a pull beside a webhook), and each paid
    /// period has its own order (`transaction_id`, its start in `purchased_at`), so its reads
    /// report that period like a store's transaction: the first order a `purchase`, a
    /// renewal's (`..N`) a `renewal`. Every other event keeps its kind.
    static func countedKind(_ a: String) -> String {
        """
        CASE WHEN \(a).provider = 'google_play' AND \(a).kind = 'subscriber_state' \
        THEN IF(\(a).transaction_id LIKE '%..%', 'renewal', 'purchase') ELSE \(a).kind END
        """
    }
}
