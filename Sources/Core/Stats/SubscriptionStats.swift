/// `stats.subscriptions`: subscription analytics over the normalized inbox of both
/// providers, computed by MariaDB (window functions, aggregates, the indexes of
/// sql/005_stats.sql). Only aggregates cross the wire: per product, per day, per placement.
/// Every definition and formula is in docs/stats.md; keep the two in step.
public enum SubscriptionStats {
    /// What the operator asks for.
    public struct Query: Sendable, Equatable {
        /// The period [from, to).
        public var from: Timestamp
        public var to: Timestamp
        public var environment: StoreEnvironment
        /// Only amounts in this currency count in revenue and MRR.
        public var currency: String
        /// IANA zone (needs MariaDB's time zone tables) or a `+HH:MM` offset for the daily
        /// series; nil = UTC.
        public var timeZone: String?

        public init(from: Timestamp, to: Timestamp, environment: StoreEnvironment, currency: String, timeZone: String? = nil) {
            self.from = from
            self.to = to
            self.environment = environment
            self.currency = currency
            self.timeZone = timeZone
        }
    }

    /// Longest period accepted (the daily series has one entry per day).
    public static let maximumPeriodDays: Int64 = 400
    /// Paywall events are kept this long (then purged).
    public static let paywallRetentionDays: Int64 = 30

    public enum QueryError: Error, Sendable, Equatable {
        case emptyPeriod
        case periodTooLong
        case unknownTimeZone(String)
    }

    /// Computes the whole report. `cadence` maps a product id to its billing cadence (the
    /// catalog, else wording); unknown products fall back to the length of their period.
    public static func compute(_ query: Query, now: Timestamp, cadence: (String) -> Cadence?,
                               on db: DatabaseConnection) throws -> JSON {
        let length = query.to.millisecondsSinceEpoch - query.from.millisecondsSinceEpoch
        guard length > 0 else { throw QueryError.emptyPeriod }
        guard length <= maximumPeriodDays * 86_400_000 else { throw QueryError.periodTooLong }
        let previousFrom = query.from.adding(milliseconds: -length)
        let zone = try normalizedZone(query.timeZone, on: db)
        let env = query.environment.rawValue
        let snapshotAt = min(query.to, now)

        let start = try snapshot(at: query.from, environment: env, currency: query.currency, cadence: cadence, on: db)
        let end = try snapshot(at: snapshotAt, environment: env, currency: query.currency, cadence: cadence, on: db)
        let days = try dailyCounts(query, previousFrom: previousFrom, zone: zone, on: db)
        let current = Counts(summing: days.filter(\.current))
        let previous = Counts(summing: days.filter { !$0.current })
        let activeUsers = try self.activeUsers(from: query.from, to: query.to, on: db)
        let profile = try subscriberProfile(query, on: db)
        let funnelFrom = max(query.from, now.adding(seconds: -paywallRetentionDays * 86_400))
        let funnel = try self.funnel(environment: env, from: funnelFrom, to: query.to, on: db)
        let series = try dailySeries(query, zone: zone, days: days.filter(\.current), on: db)
        let recent = try recentEvents(environment: env, on: db)

        return [
            "environment": .string(env),
            "currency": .string(query.currency),
            "timeZone": .string(zone ?? "UTC"),
            "period": ["from": .string(query.from.iso8601), "to": .string(query.to.iso8601)],
            "previousPeriod": ["from": .string(previousFrom.iso8601), "to": .string(query.from.iso8601)],
            "snapshots": ["start": start.json, "end": end.json],
            "counts": ["current": current.json, "previous": previous.json],
            "derived": [
                "trialConversionPct": .double(pct(current.converted, current.trials)),
                "previousTrialConversionPct": .double(pct(previous.converted, previous.trials)),
                "activeUsers": .int(activeUsers),
                "payingPct": .double(pct(end.paying, activeUsers)),
            ],
            "subscriberProfile": profile,
            "funnel": [
                "from": .string(funnelFrom.iso8601), "to": .string(query.to.iso8601),
                "retentionDays": .int(paywallRetentionDays),
                "placements": .array(funnel),
            ],
            "series": .array(series),
            "recent": .array(recent),
        ]
    }

    /// `round(100 a / b, 1)`, 0 when b is 0 (half away from zero).
    public static func pct(_ a: Int64, _ b: Int64) -> Double {
        guard b != 0 else { return 0 }
        return (Double(a) * 1000 / Double(b)).rounded(.toNearestOrAwayFromZero) / 10
    }

    /// Monthly factor of a cadence: MRR = period price × factor.
    public static func monthlyFactor(_ cadence: Cadence) -> Double {
        switch cadence {
        case .weekly: return 52.0 / 12.0
        case .monthly: return 1
        case .twoMonths: return 1.0 / 2.0
        case .quarterly: return 1.0 / 3.0
        case .semiannual: return 1.0 / 6.0
        case .yearly: return 1.0 / 12.0
        case .lifetime, .consumable: return 0
        }
    }

    /// A cadence from the length of a paid period, for products the catalog does not name.
    public static func cadence(periodDays days: Double) -> Cadence {
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
        AND \(a).kind NOT IN ('test', 'unknown', 'transfer')
        """
    }

    /// Kinds that open a period of access (the product and price in force come from them).
    static func periodStart(_ a: String) -> String {
        "\(a).kind IN ('purchase', 'renewal', 'promotional', 'temporary_grant', 'non_renewing_purchase')"
    }

    static let lostKinds = "('expiration', 'refund', 'revoke')"

    // MARK: - Snapshot at an instant

    struct ProductSnapshot {
        var productId: String?
        var active: Int64
        var trial: Int64
        var cancelling: Int64
        var mrrMilli: Int64
        var cadence: Cadence?
    }

    struct Snapshot {
        var at: Timestamp
        var products: [ProductSnapshot]
        var active: Int64 { products.reduce(0) { $0 + $1.active } }
        var trial: Int64 { products.reduce(0) { $0 + $1.trial } }
        var paying: Int64 { active - trial }
        var cancelling: Int64 { products.reduce(0) { $0 + $1.cancelling } }
        var mrrMilli: Int64 { products.reduce(0) { $0 + $1.mrrMilli } }

        var json: JSON {
            [
                "at": .string(at.iso8601),
                "active": .int(active), "trial": .int(trial), "paying": .int(paying),
                "cancelling": .int(cancelling), "mrrMilli": .int(mrrMilli),
                "byProduct": .array(products.map { p in
                    [
                        "productId": p.productId.map(JSON.string) ?? .null,
                        "active": .int(p.active), "trial": .int(p.trial), "paying": .int(p.active - p.trial),
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
    static func snapshot(at t: Timestamp, environment env: String, currency: String,
                         cadence: (String) -> Cadence?, on db: DatabaseConnection) throws -> Snapshot {
        let latest = "ORDER BY p.intrinsic_at DESC, p.id DESC LIMIT 1"
        let sameSubscription: SQLQuery = """
            p.environment = \(env) AND p.subscription_id = s.subscription_id AND p.intrinsic_at < \(t) AND \(unsafeRaw: counted("p"))
            """
        let trial = "COALESCE(pe.is_trial, le.is_trial)"
        let rows = try db.query("""
            SELECT COALESCE(pe.product_id, le.product_id) AS product_id,
              COUNT(*) AS active,
              SUM(\(unsafeRaw: trial) = 1) AS trial,
              SUM(COALESCE(z.cancelling, 0)) AS cancelling,
              SUM(CASE WHEN \(unsafeRaw: trial) = 0 AND pe.currency = \(currency) AND pe.price_milli > 0
                  THEN pe.price_milli ELSE 0 END) AS price_sum,
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
            WHERE le.kind NOT IN \(unsafeRaw: lostKinds)
              AND CASE WHEN le.expires_at IS NOT NULL THEN GREATEST(le.expires_at, COALESCE(le.grace_expires_at, le.expires_at))
                ELSE (SELECT GREATEST(p.expires_at, COALESCE(p.grace_expires_at, p.expires_at)) FROM billing_events p
                      WHERE p.environment = \(env) AND p.subscription_id = z.subscription_id AND p.intrinsic_at < \(t)
                        AND \(unsafeRaw: counted("p")) AND p.expires_at IS NOT NULL \(unsafeRaw: latest))
                END > \(t)
            GROUP BY COALESCE(pe.product_id, le.product_id)
            ORDER BY product_id
            """)
        var products: [ProductSnapshot] = []
        for row in rows {
            let productId = try row.optionalString("product_id")
            let priceSum = try row.int64("price_sum")
            let periodDays = try row.optionalDouble("period_days")
            let productCadence = productId.flatMap(cadence) ?? periodDays.map { self.cadence(periodDays: $0) }
            let mrr = productCadence.map { (Double(priceSum) * monthlyFactor($0)).rounded(.toNearestOrAwayFromZero) } ?? 0
            products.append(ProductSnapshot(productId: productId, active: try row.int64("active"), trial: try row.int64("trial"),
                                            cancelling: try row.int64("cancelling"), mrrMilli: Int64(mrr),
                                            cadence: productCadence))
        }
        return Snapshot(at: t, products: products)
    }

    // MARK: - Counts over [from, to) and [from - length, from)

    struct DayCounts {
        var current: Bool
        var day: String
        var counts: Counts
    }

    struct Counts {
        var new: Int64 = 0, trials: Int64 = 0, converted: Int64 = 0, renewals: Int64 = 0
        var cancellations: Int64 = 0, lost: Int64 = 0, refunds: Int64 = 0
        var grossMilli: Int64 = 0, refundedMilli: Int64 = 0

        init() {}

        init(summing days: [DayCounts]) {
            for d in days {
                new += d.counts.new; trials += d.counts.trials; converted += d.counts.converted
                renewals += d.counts.renewals; cancellations += d.counts.cancellations; lost += d.counts.lost
                refunds += d.counts.refunds; grossMilli += d.counts.grossMilli; refundedMilli += d.counts.refundedMilli
            }
        }

        var json: JSON {
            [
                "new": .int(new), "trials": .int(trials), "converted": .int(converted), "renewals": .int(renewals),
                "cancellations": .int(cancellations), "lost": .int(lost), "refunds": .int(refunds),
                "revenueMilli": .int(grossMilli - refundedMilli),
                "grossMilli": .int(grossMilli), "refundedMilli": .int(refundedMilli),
            ]
        }
    }

    /// The local day of an inbox column, in `zone` (validated) or UTC.
    static func localDay(_ expression: SQLQuery, zone: String?) -> SQLQuery {
        guard let zone else { return "DATE(\(expression))" }
        return "DATE(CONVERT_TZ(\(expression), '+00:00', \(zone)))"
    }

    /// One scan of the events of both periods (index environment, intrinsic_at): window
    /// functions rank each event within its subscription (duplicates of one period reported
    /// by two channels, the first cancellation/loss/refund of a subscription in a period);
    /// per-subscription index lookups decide "first event ever" (only for a purchase that
    /// is its subscription's first event in the scan) and "previous period start was a
    /// trial" (only for the first paid period in the scan, or after a trial seen in the
    /// scan: otherwise the previous period start is in the scan and paid). Grouped by
    /// (period, local day).
    static func dailyCounts(_ q: Query, previousFrom: Timestamp, zone: String?, on db: DatabaseConnection) throws -> [DayCounts] {
        let env = q.environment.rawValue
        let before = "(p.intrinsic_at < x.intrinsic_at OR (p.intrinsic_at = x.intrinsic_at AND p.id < x.id))"
        let rows = try db.query("""
            SELECT y.cur, \(localDay("y.intrinsic_at", zone: zone)) AS day,
              SUM(y.is_new) AS new_count,
              SUM(y.is_new AND y.is_trial = 1) AS trials,
              SUM(y.converted) AS converted,
              SUM(y.kind = 'renewal' AND y.rk_period = 1) AS renewals,
              SUM(y.kind = 'cancellation' AND y.rk_class = 1) AS cancellations,
              SUM(y.kind IN \(unsafeRaw: lostKinds) AND y.rk_class = 1) AS lost,
              SUM(y.kind = 'refund' AND y.rk_refund = 1) AS refunds,
              SUM(CASE WHEN y.is_paid_period = 1 AND y.rk_period = 1 AND y.currency = \(q.currency) AND y.price_milli > 0
                  THEN y.price_milli ELSE 0 END) AS gross_milli,
              SUM(CASE WHEN y.kind = 'refund' AND y.rk_refund_period = 1 AND y.currency = \(q.currency)
                  THEN ABS(COALESCE(y.price_milli, 0)) ELSE 0 END) AS refunded_milli
            FROM (
              -- The LIMIT keeps this derived table from being merged into the outer query:
              -- MariaDB 10.11 loses the correlated references to x when a merged prepared
              -- statement is executed a second time ("Unknown column x.subscription_id").
              SELECT x.*,
                CASE WHEN x.rk_first = 1 AND x.kind = 'purchase' THEN NOT EXISTS (
                    SELECT 1 FROM billing_events p
                    WHERE p.environment = \(env) AND p.subscription_id = x.subscription_id
                      AND p.intrinsic_at <= x.intrinsic_at AND \(unsafeRaw: before) AND \(unsafeRaw: counted("p")))
                  ELSE 0 END AS is_new,
                CASE WHEN x.is_paid_period = 1 AND x.rk_period = 1 AND (x.paid_seen = 1 OR x.trial_seen > 0) THEN COALESCE((
                    SELECT p.is_trial FROM billing_events p
                    WHERE p.environment = \(env) AND p.subscription_id = x.subscription_id
                      AND p.intrinsic_at <= x.intrinsic_at AND \(unsafeRaw: before)
                      AND p.status IN ('applied', 'unmatched') AND p.kind IN ('purchase', 'renewal')
                    ORDER BY p.intrinsic_at DESC, p.id DESC LIMIT 1), 0)
                  ELSE 0 END AS converted
              FROM (
                -- Two sorts only: w (the subscription's events in time order) for "first in
                -- the scan" and running counts of cancellations/losses/refunds per period,
                -- wp (the events of one period, by period key) for cross-channel twins.
                SELECT e.id, e.subscription_id, e.intrinsic_at, e.kind, e.is_trial, e.price_milli, e.currency,
                  e.intrinsic_at >= \(q.from) AS cur,
                  (e.kind IN ('purchase', 'renewal') AND e.is_trial = 0) AS is_paid_period,
                  ROW_NUMBER() OVER w AS rk_first,
                  SUM(e.kind IN ('purchase', 'renewal') AND e.is_trial = 0) OVER w AS paid_seen,
                  SUM(e.kind IN ('purchase', 'renewal') AND e.is_trial = 1) OVER w AS trial_seen,
                  IF(e.kind IN ('purchase', 'renewal'),
                     SUM(e.kind IN ('purchase', 'renewal')) OVER wp, 0) AS rk_period,
                  CASE WHEN e.kind = 'cancellation' THEN
                         IF(e.intrinsic_at >= \(q.from), SUM(e.kind = 'cancellation' AND e.intrinsic_at >= \(q.from)) OVER w,
                            SUM(e.kind = 'cancellation' AND e.intrinsic_at < \(q.from)) OVER w)
                       WHEN e.kind IN \(unsafeRaw: lostKinds) THEN
                         IF(e.intrinsic_at >= \(q.from), SUM(e.kind IN \(unsafeRaw: lostKinds) AND e.intrinsic_at >= \(q.from)) OVER w,
                            SUM(e.kind IN \(unsafeRaw: lostKinds) AND e.intrinsic_at < \(q.from)) OVER w)
                  END AS rk_class,
                  IF(e.kind = 'refund',
                     IF(e.intrinsic_at >= \(q.from), SUM(e.kind = 'refund' AND e.intrinsic_at >= \(q.from)) OVER w,
                        SUM(e.kind = 'refund' AND e.intrinsic_at < \(q.from)) OVER w), 0) AS rk_refund,
                  IF(e.kind = 'refund', SUM(e.kind = 'refund') OVER wp, 0) AS rk_refund_period
                FROM billing_events e
                WHERE e.environment = \(env) AND e.intrinsic_at >= \(previousFrom) AND e.intrinsic_at < \(q.to)
                  AND \(unsafeRaw: counted("e"))
                WINDOW w AS (PARTITION BY e.subscription_id ORDER BY e.intrinsic_at, e.id),
                       wp AS (PARTITION BY e.subscription_id, COALESCE(e.purchased_at, e.intrinsic_at)
                              ORDER BY e.intrinsic_at, e.id)
              ) x
              LIMIT 18446744073709551615
            ) y
            GROUP BY y.cur, day
            ORDER BY y.cur, day
            """)
        return try rows.map { row in
            var c = Counts()
            c.new = try row.int64("new_count")
            c.trials = try row.int64("trials")
            c.converted = try row.int64("converted")
            c.renewals = try row.int64("renewals")
            c.cancellations = try row.int64("cancellations")
            c.lost = try row.int64("lost")
            c.refunds = try row.int64("refunds")
            c.grossMilli = try row.int64("gross_milli")
            c.refundedMilli = try row.int64("refunded_milli")
            return DayCounts(current: try row.bool("cur"), day: try dayString(row, "day"), counts: c)
        }
    }

    static func dayString(_ row: SQLRow, _ column: String) throws -> String {
        let civil = try row.timestamp(column).civil
        return formatDay(civil)
    }

    static func formatDay(_ c: CivilDateTime) -> String {
        func pad(_ n: Int, _ width: Int) -> String {
            let s = String(n)
            return String(repeating: "0", count: max(0, width - s.count)) + s
        }
        return "\(pad(c.year, 4))-\(pad(c.month, 2))-\(pad(c.day, 2))"
    }

    /// Every local day of [from, to) with its new and lost subscriptions (zeros included).
    static func dailySeries(_ q: Query, zone: String?, days: [DayCounts], on db: DatabaseConnection) throws -> [JSON] {
        let bounds = try db.queryOne("""
            SELECT \(localDay("CAST(\(q.from) AS DATETIME(3))", zone: zone)) AS first_day,
                   \(localDay("CAST(\(q.to.adding(milliseconds: -1)) AS DATETIME(3))", zone: zone)) AS last_day
            """)
        guard let bounds else { return [] }
        var day = try bounds.timestamp("first_day")
        let last = try bounds.timestamp("last_day")
        var byDay: [String: Counts] = [:]
        for d in days { byDay[d.day] = d.counts }
        var series: [JSON] = []
        while day <= last {
            let key = formatDay(day.civil)
            let c = byDay[key]
            series.append(["date": .string(key), "new": .int(c?.new ?? 0), "lost": .int(c?.lost ?? 0)])
            day = day.adding(seconds: 86_400)
        }
        return series
    }

    // MARK: - Active users, profile, funnel, recent events

    /// Users seen with a valid ID token on a UTC day of the period (billing_user_days).
    static func activeUsers(from: Timestamp, to: Timestamp, on db: DatabaseConnection) throws -> Int64 {
        let row = try db.queryOne("""
            SELECT COUNT(DISTINCT user_id) AS n FROM billing_user_days
            WHERE day >= DATE(\(from)) AND day <= DATE(\(to.adding(milliseconds: -1)))
            """)
        return try row?.int64("n") ?? 0
    }

    /// Subscriptions born in [from, to) whose owner is known: the median of whole days from
    /// the owner's sign-up to the subscription's first event (negative counts as 0).
    static func subscriberProfile(_ q: Query, on db: DatabaseConnection) throws -> JSON {
        let env = q.environment.rawValue
        let row = try db.queryOne("""
            SELECT COUNT(*) OVER () AS n, MEDIAN(d.days) OVER () AS median_days FROM (
              SELECT GREATEST(0, TIMESTAMPDIFF(DAY, u.created_at, e.intrinsic_at)) AS days
              FROM billing_events e
              JOIN billing_users u ON u.id = e.user_id
              WHERE e.environment = \(env) AND e.intrinsic_at >= \(q.from) AND e.intrinsic_at < \(q.to)
                AND \(unsafeRaw: counted("e")) AND e.kind = 'purchase'
                AND NOT EXISTS (
                  SELECT 1 FROM billing_events p
                  WHERE p.environment = \(env) AND p.subscription_id = e.subscription_id
                    AND p.intrinsic_at <= e.intrinsic_at AND (p.intrinsic_at < e.intrinsic_at OR p.id < e.id)
                    AND \(unsafeRaw: counted("p")))
            ) d
            LIMIT 1
            """)
        guard let row else { return ["subscriptions": 0, "medianDaysToSubscribe": nil] }
        let median = try row.optionalDouble("median_days").map { ($0 * 10).rounded(.toNearestOrAwayFromZero) / 10 }
        return ["subscriptions": .int(try row.int64("n")), "medianDaysToSubscribe": median.map(JSON.double) ?? .null]
    }

    static func funnel(environment env: String, from: Timestamp, to: Timestamp, on db: DatabaseConnection) throws -> [JSON] {
        guard from < to else { return [] }
        let rows = try db.query("""
            SELECT placement, SUM(type = 'view') AS views, SUM(type = 'purchase') AS attempts,
                   SUM(type = 'purchase' AND result = 'done') AS purchases
            FROM billing_paywall_events
            WHERE environment = \(env) AND received_at >= \(from) AND received_at < \(to)
            GROUP BY placement ORDER BY placement
            """)
        return try rows.map { row in
            let views = try row.int64("views"), purchases = try row.int64("purchases")
            return [
                "placement": .string(try row.string("placement")), "views": .int(views),
                "attempts": .int(try row.int64("attempts")), "purchases": .int(purchases),
                "conversionPct": .double(pct(purchases, views)),
            ]
        }
    }

    static func recentEvents(environment env: String, on db: DatabaseConnection) throws -> [JSON] {
        let rows = try db.query("""
            SELECT e.id, e.provider, e.event_type, e.kind, e.status, e.user_id, e.subscription_id, e.product_id,
                   e.is_trial, e.price_milli, e.currency, e.intrinsic_at, e.expires_at
            FROM billing_events e
            WHERE e.environment = \(env) AND e.intrinsic_at IS NOT NULL
            ORDER BY e.intrinsic_at DESC, e.id DESC
            LIMIT 20
            """)
        return try rows.map { row in
            [
                "id": .int(Int64(try row.uint64("id"))),
                "provider": .string(try row.string("provider")),
                "type": .string(try row.string("event_type")),
                "kind": .string(try row.string("kind")),
                "status": .string(try row.string("status")),
                "userId": try row.optionalString("user_id").map(JSON.string) ?? .null,
                "subscriptionId": try row.optionalString("subscription_id").map(JSON.string) ?? .null,
                "productId": try row.optionalString("product_id").map(JSON.string) ?? .null,
                "isTrial": .bool(try row.bool("is_trial")),
                "priceMilli": try row.optionalInt64("price_milli").map(JSON.int) ?? .null,
                "currency": try row.optionalString("currency").map(JSON.string) ?? .null,
                "at": .string(try row.timestamp("intrinsic_at").iso8601),
                "expiresAt": try row.optionalTimestamp("expires_at").map { .string($0.iso8601) } ?? .null,
            ]
        }
    }

    /// nil for UTC; otherwise the zone as given once MariaDB knows it (named zones need its
    /// time zone tables, `+HH:MM` offsets never do).
    static func normalizedZone(_ zone: String?, on db: DatabaseConnection) throws -> String? {
        guard let zone, !zone.isEmpty, !["UTC", "Etc/UTC", "Z", "+00:00"].contains(zone) else { return nil }
        guard zone.utf8.count <= 64 else { throw QueryError.unknownTimeZone(zone) }
        let row = try db.queryOne("SELECT CONVERT_TZ('2000-01-01 00:00:00', '+00:00', \(zone)) AS probe")
        guard let row, try row.optionalTimestamp("probe") != nil else { throw QueryError.unknownTimeZone(zone) }
        return zone
    }
}
