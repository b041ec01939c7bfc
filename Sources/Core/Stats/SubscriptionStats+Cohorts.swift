extension SubscriptionStats {
    // MARK: - stats.cohorts

    /// Longest [from, to) of `stats.cohorts` (about three years): one paying set per month
    /// boundary, at most 37.
    static let maximumCohortDays: Int64 = 1_100

    /// A calendar month, UTC.
    struct Month: Hashable, Comparable, Sendable {
        /// Months since year 0: year × 12 + month − 1.
        var index: Int

        init(_ t: Timestamp) {
            let c = t.civil
            index = c.year * 12 + c.month - 1
        }

        init(index: Int) { self.index = index }

        /// Its first instant.
        var start: Timestamp {
            Timestamp(CivilDateTime(year: index / 12, month: index % 12 + 1, day: 1))
        }

        /// `YYYY-MM`.
        var text: String { String(formatDay(start.civil).prefix(7)) }

        static func < (a: Month, b: Month) -> Bool { a.index < b.index }
        static func + (m: Month, n: Int) -> Month { Month(index: m.index + n) }
    }

    /// One cohort's figures while they are gathered.
    struct Cohort {
        var subscribers: Int64 = 0
        /// Paying subscriptions per month index ≥ 1.
        var paying: [Int: Int64] = [:]
        /// The realized sales and refunds, folded as the counts fold them.
        var revenue = Counts()
    }

    /// `stats.cohorts` (docs/stats.md, "Cohorts"; `q.timeZone` is not used: months are
    /// UTC): per UTC month of a subscription's first paid period, its
    /// subscribers, the share still paying at each following month's first instant (up to
    /// min(to, now)) and the net revenue they brought up to `to`, per subscriber.
    /// Three queries, whatever the number of subscriptions: the cohort sizes, the paying
    /// sets of every month boundary joined to the cohorts (MariaDB counts, per cohort and
    /// boundary), and one scan of the cohorts' events ordered by subscription, folded one
    /// subscription at a time (memory: one subscription's periods and one total per cohort).
    static func cohorts(_ q: Query, now: Timestamp, on db: DatabaseConnection) throws -> JSON {
        let length = q.to.millisecondsSinceEpoch - q.from.millisecondsSinceEpoch
        guard length > 0 else { throw QueryError.emptyPeriod }
        guard length <= maximumCohortDays * 86_400_000 else { throw QueryError.periodTooLong }
        try SubscriptionStates.refresh(on: db, now: now)
        let asOf = min(q.to, now)
        let env = q.environment.rawValue
        let members = cohortMembers(q)
        let first = Month(q.from)
        let last = Month(q.to.adding(milliseconds: -1))
        var cohorts: [Month: Cohort] = [:]
        for m in first.index...last.index { cohorts[Month(index: m)] = Cohort() }

        for row in try db.query("SELECT c.cohort, COUNT(*) AS n FROM (\(members)) c GROUP BY c.cohort") {
            cohorts[Month(try row.timestamp("cohort")), default: Cohort()].subscribers = try row.int64("n")
        }
        // Every month boundary after the first cohort's month, up to asOf: its paying set,
        // the snapshot's (active, not trial, not family-shared, a price), per cohort.
        var boundaries: [Month] = []
        var b = first + 1
        while b.start <= asOf {
            boundaries.append(b)
            b = b + 1
        }
        if !boundaries.isEmpty {
            let paying = boundaries.enumerated().map { (n, b) -> SQLQuery in
                """
                SELECT \(Int64(n)) AS boundary, s.subscription_id
                \(SubscriptionStates.active(at: b.start, environment: env)) AND \(unsafeRaw: SubscriptionStates.paid)
                """
            }
            let union = paying.dropFirst().reduce(paying[0]) { "\($0) UNION ALL \($1)" }
            try db.forEachRow(
                """
                SELECT c.cohort, p.boundary, COUNT(*) AS n
                FROM (\(members)) c JOIN (\(union)) p ON p.subscription_id = c.subscription_id
                GROUP BY c.cohort, p.boundary
                """
            ) { (row: SQLRow) throws(DatabaseError) in
                let cohort = Month(try row.timestamp("cohort"))
                let boundary = boundaries[Int(try row.int64("boundary"))]
                guard boundary > cohort else { return }
                cohorts[cohort, default: Cohort()].paying[boundary.index - cohort.index] = try row.int64("n")
            }
        }
        // Realized revenue: every counted event of the cohorts' subscriptions before `to`,
        // each subscription folded from its first event as the counts fold a period.
        var subscription: String?
        var fold = SubscriptionFold(seenBefore: false, lastPeriodTrial: false)
        var revenue: [Month: Counts] = [:]
        try db.forEachRow(
            """
            SELECT c.cohort, e.subscription_id, \(unsafeRaw: countedKind("e")) AS kind, e.is_trial, e.price_milli, e.currency,
              e.family_shared,
              COALESCE(e.purchased_at, e.intrinsic_at) AS period_key
            FROM (\(members)) c JOIN billing_events e ON e.environment = \(env) AND e.subscription_id = c.subscription_id
            WHERE e.intrinsic_at < \(q.to) AND \(unsafeRaw: counted("e"))
            ORDER BY e.subscription_id, e.intrinsic_at, e.id
            """
        ) { (row: SQLRow) throws(DatabaseError) in
            let key = try row.string("subscription_id")
            if key != subscription {
                subscription = key
                fold = SubscriptionFold(seenBefore: false, lastPeriodTrial: false)
            }
            let periodKey = try row.timestamp("period_key")
            let event = FoldedEvent(
                kind: try row.string("kind"), isTrial: try row.bool("is_trial"), priceMilli: try row.optionalInt64("price_milli"),
                currency: try row.optionalString("currency"), isSale: !(try row.bool("family_shared")), current: true,
                periodKey: periodKey.millisecondsSinceEpoch, purchaseDay: RateDay(periodKey))
            fold.fold(event, into: &revenue[Month(try row.timestamp("cohort")), default: Counts()])
        }
        try convert(&revenue, to: q.currency, on: db)
        for (month, counts) in revenue { cohorts[month, default: Cohort()].revenue = counts }

        let rows: [JSON] = cohorts.keys.sorted().map { month in
            let c = cohorts[month]!
            var retention: [JSON] = [["index": 0, "paying": .int(c.subscribers), "pct": .double(c.subscribers > 0 ? 100 : 0)]]
            var k = 1
            while (month + k).start <= asOf {
                let paying = c.paying[k] ?? 0
                retention.append(["index": .int(Int64(k)), "paying": .int(paying), "pct": .double(pct(paying, c.subscribers))])
                k += 1
            }
            let net = Money.subtract(c.revenue.grossMilli, c.revenue.refundedMilli)
            return [
                "month": .string(month.text), "subscribers": .int(c.subscribers), "retention": .array(retention),
                "grossMilli": .int(c.revenue.grossMilli), "refundedMilli": .int(c.revenue.refundedMilli),
                "revenueMilli": .int(net),
                "ltvMilli": .int(c.subscribers > 0 ? Money.dividedRounded(Int128(net), by: Int128(c.subscribers)) : 0),
                "unconverted": byCurrencyJSON(
                    c.revenue.unconverted.mapValues { ["grossMilli": .int($0.grossMilli), "refundedMilli": .int($0.refundedMilli)] }),
            ]
        }
        return [
            "environment": .string(q.environment.rawValue), "currency": .string(q.currency), "by": "month",
            "period": ["from": .string(q.from.iso8601), "to": .string(q.to.iso8601)], "asOf": .string(asOf.iso8601),
            "cohorts": .array(rows),
        ]
    }

    /// The kinds of a paid period (the cohort's first one): a purchase or renewal, or a
    /// subscriber state pulled from RevenueCat, not a trial, not family-shared, with a price.
    static func paidPeriodEvent(_ a: String) -> String {
        """
        \(a).kind IN ('purchase', 'renewal', 'subscriber_state') AND \(a).is_trial = 0 AND \(a).family_shared = 0 \
        AND \(a).price_milli > 0 AND \(counted(a))
        """
    }

    /// `subscription_id, cohort` (the first day of the UTC month of its first paid period) of
    /// every subscription whose first paid period starts in [from, to): a range of the
    /// `(environment, intrinsic_at)` index, and one index look per subscription for a paid
    /// period before `from`.
    static func cohortMembers(_ q: Query) -> SQLQuery {
        let env = q.environment.rawValue
        return """
            SELECT e.subscription_id, CAST(DATE_FORMAT(MIN(e.intrinsic_at), '%Y-%m-01') AS DATETIME(3)) AS cohort
            FROM billing_events e
            WHERE e.environment = \(env) AND e.intrinsic_at >= \(q.from) AND e.intrinsic_at < \(q.to)
              AND \(unsafeRaw: paidPeriodEvent("e"))
              AND NOT EXISTS (SELECT 1 FROM billing_events p
                              WHERE p.environment = \(env) AND p.subscription_id = e.subscription_id
                                AND p.intrinsic_at < \(q.from) AND \(unsafeRaw: paidPeriodEvent("p")))
            GROUP BY e.subscription_id
            """
    }
}
