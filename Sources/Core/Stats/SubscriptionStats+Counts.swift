extension SubscriptionStats {
    // MARK: - Counts over [from, to) and [from - length, from)

    struct DayCounts {
        var current: Bool
        var day: String
        var counts: Counts
    }

    struct Counts {
        var new: Int64 = 0, trials: Int64 = 0, converted: Int64 = 0, renewals: Int64 = 0
        var cancellations: Int64 = 0, lost: Int64 = 0, refunds: Int64 = 0
        var billingIssues: Int64 = 0, revocations: Int64 = 0
        var grossMilli: Int64 = 0, refundedMilli: Int64 = 0

        init() {}

        init(summing days: [DayCounts]) {
            for d in days {
                new += d.counts.new; trials += d.counts.trials; converted += d.counts.converted
                renewals += d.counts.renewals; cancellations += d.counts.cancellations; lost += d.counts.lost
                refunds += d.counts.refunds; billingIssues += d.counts.billingIssues; revocations += d.counts.revocations
                grossMilli += d.counts.grossMilli; refundedMilli += d.counts.refundedMilli
            }
        }

        var json: JSON {
            [
                "new": .int(new), "trials": .int(trials), "converted": .int(converted), "renewals": .int(renewals),
                "cancellations": .int(cancellations), "lost": .int(lost), "refunds": .int(refunds),
                "billingIssues": .int(billingIssues), "revocations": .int(revocations),
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
              SUM(y.kind = 'revoke' AND y.rk_revoke = 1) AS revocations,
              SUM(y.kind = 'billing_issue' AND y.rk_billing = 1) AS billing_issues,
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
                  SUM(e.kind IN ('purchase', 'renewal') AND e.is_trial = 0) OVER wr AS paid_seen,
                  SUM(e.kind IN ('purchase', 'renewal') AND e.is_trial = 1) OVER wr AS trial_seen,
                  IF(e.kind IN ('purchase', 'renewal'),
                     SUM(e.kind IN ('purchase', 'renewal')) OVER wpr, 0) AS rk_period,
                  CASE WHEN e.kind = 'cancellation' THEN
                         IF(e.intrinsic_at >= \(q.from), SUM(e.kind = 'cancellation' AND e.intrinsic_at >= \(q.from)) OVER wr,
                            SUM(e.kind = 'cancellation' AND e.intrinsic_at < \(q.from)) OVER wr)
                       WHEN e.kind IN \(unsafeRaw: lostKinds) THEN
                         IF(e.intrinsic_at >= \(q.from), SUM(e.kind IN \(unsafeRaw: lostKinds) AND e.intrinsic_at >= \(q.from)) OVER wr,
                            SUM(e.kind IN \(unsafeRaw: lostKinds) AND e.intrinsic_at < \(q.from)) OVER wr)
                  END AS rk_class,
                  IF(e.kind = 'refund',
                     IF(e.intrinsic_at >= \(q.from), SUM(e.kind = 'refund' AND e.intrinsic_at >= \(q.from)) OVER wr,
                        SUM(e.kind = 'refund' AND e.intrinsic_at < \(q.from)) OVER wr), 0) AS rk_refund,
                  IF(e.kind = 'revoke',
                     IF(e.intrinsic_at >= \(q.from), SUM(e.kind = 'revoke' AND e.intrinsic_at >= \(q.from)) OVER wr,
                        SUM(e.kind = 'revoke' AND e.intrinsic_at < \(q.from)) OVER wr), 0) AS rk_revoke,
                  IF(e.kind = 'refund', SUM(e.kind = 'refund') OVER wpr, 0) AS rk_refund_period,
                  -- One failed charge is one billing issue: RevenueCat's BILLING_ISSUE and
                  -- CANCELLATION/BILLING_ERROR, Apple's DID_FAIL_TO_RENEW and
                  -- GRACE_PERIOD_EXPIRED all name the same period.
                  IF(e.kind = 'billing_issue', SUM(e.kind = 'billing_issue') OVER wpr, 0) AS rk_billing
                FROM billing_events e
                WHERE e.environment = \(env) AND e.intrinsic_at >= \(previousFrom) AND e.intrinsic_at < \(q.to)
                  AND \(unsafeRaw: counted("e"))
                WINDOW w AS (PARTITION BY e.subscription_id ORDER BY e.intrinsic_at, e.id),
                       wp AS (PARTITION BY e.subscription_id, COALESCE(e.purchased_at, e.intrinsic_at)
                              ORDER BY e.intrinsic_at, e.id),
                       -- The running sums, over the same sorts: (intrinsic_at, id) is unique, so a
                       -- ROWS frame ends where the default RANGE frame does, without MariaDB's
                       -- search for peer rows (a fifth of this query's time on 370k events).
                       wr AS (w ROWS UNBOUNDED PRECEDING),
                       wpr AS (wp ROWS UNBOUNDED PRECEDING)
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
            c.revocations = try row.int64("revocations")
            c.billingIssues = try row.int64("billing_issues")
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

}
