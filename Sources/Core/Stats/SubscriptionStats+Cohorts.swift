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
    /// Every cohort of a whole month is read from the sums and counts the refresh keeps
    /// (`cohortSums`, `cohortPaying`); a first cohort begun within its month (`from` not a
    /// month's first instant) from its members' rows (`partialCohort`): one month's members,
    /// whatever the report's length. Memory: one total per cohort, currency and day.
    static func cohorts(_ q: Query, now: Timestamp, on db: DatabaseConnection) throws -> JSON {
        let length = q.to.millisecondsSinceEpoch - q.from.millisecondsSinceEpoch
        guard length > 0 else { throw QueryError.emptyPeriod }
        guard length <= maximumCohortDays * 86_400_000 else { throw QueryError.periodTooLong }
        try SubscriptionStates.refresh(on: db, now: now)
        let asOf = min(q.to, now)
        let first = Month(q.from)
        let last = Month(q.to.adding(milliseconds: -1))
        var cohorts: [Month: Cohort] = [:]
        for m in first.index...last.index { cohorts[Month(index: m)] = Cohort() }

        // Every month boundary after the first cohort's month, up to asOf.
        var boundaries: [Month] = []
        var b = first + 1
        while b.start <= asOf {
            boundaries.append(b)
            b = b + 1
        }
        // The whole months' cohorts (every one but a first begun within its month) from the
        // sums and counts the refresh keeps; a first cohort begun within its month from its
        // members' rows.
        var revenue: [Month: Counts] = [:]
        let whole = Month(q.from).start == q.from ? first : first + 1
        if whole <= last {
            var sums = q
            sums.from = whole.start
            try cohortSums(sums, last: last, into: &cohorts, revenue: &revenue, on: db)
            if !boundaries.isEmpty { try cohortPaying(sums, last: last, boundaries: boundaries, into: &cohorts, on: db) }
        }
        if whole != first {
            try partialCohort(
                q, membersUntil: min(q.to, whole.start), boundaries: boundaries, into: &cohorts, revenue: &revenue, on: db)
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

    /// The cohort of `q.from`'s month when `q.from` is within it: its members (first paid in
    /// [q.from, membersUntil)), their classified sales and refunds before `q.to`
    /// (billing_counted_events, sql/026) summed per currency and purchase day, and its
    /// subscriptions' paying states (by the subscription index), each counted at the
    /// boundaries it is active at. The sums hold whole months only; one month's members are
    /// read here, not the report's. The members first, each one's rows by the subscription
    /// index (`STRAIGHT_JOIN`, `FORCE INDEX`), whatever MariaDB estimates of `to`'s range.
    static func partialCohort(
        _ q: Query, membersUntil: Timestamp, boundaries: [Month], into cohorts: inout [Month: Cohort],
        revenue: inout [Month: Counts], on db: DatabaseConnection
    ) throws {
        let env = q.environment.rawValue
        let cohort = Month(q.from)
        var members = q
        members.to = membersUntil
        let memberRows = cohortMembers(members)
        if let row = try db.queryOne("SELECT COUNT(*) AS n FROM (\(memberRows)) c") {
            cohorts[cohort, default: Cohort()].subscribers = try row.int64("n")
        }
        try db.forEachRow(
            """
            SELECT \(unsafeRaw: moneyGroup), \(unsafeRaw: moneySums)
            FROM (\(memberRows)) c
            STRAIGHT_JOIN billing_counted_events k FORCE INDEX (billing_counted_events_subscription)
              ON k.environment = \(env) AND k.subscription_id = c.subscription_id
            WHERE k.intrinsic_at < \(q.to)
            GROUP BY money_currency, money_day
            """
        ) { (row: SQLRow) throws(DatabaseError) in
            try revenue[cohort, default: Counts()].addMoney(row)
        }
        guard !boundaries.isEmpty else { return }
        try db.forEachRow(
            """
            SELECT s.valid_from, s.active_until
            FROM (\(memberRows)) c
            STRAIGHT_JOIN billing_subscription_states s FORCE INDEX (billing_subscription_states_subscription)
              ON s.environment = \(env) AND s.subscription_id = c.subscription_id
            WHERE \(unsafeRaw: SubscriptionStates.paid) AND s.cohort_paid_at >= \(q.from) AND s.cohort_paid_at < \(membersUntil)
            """
        ) { (row: SQLRow) throws(DatabaseError) in
            let validFrom = try row.timestamp("valid_from")
            let activeUntil = try row.timestamp("active_until")
            for boundary in boundaries where validFrom < boundary.start && boundary.start < activeUntil {
                cohorts[cohort, default: Cohort()].paying[boundary.index - cohort.index, default: 0] += 1
            }
        }
    }

    /// The cohorts' subscribers and revenue for a `from` that is a month's first instant, from
    /// the sums the refresh keeps (`billing_cohort_sums`, sql/028): the whole UTC days before
    /// `to`'s; the rows of `to`'s own day before `to`, of subscriptions first paid before `to`;
    /// less the earlier rows of the subscriptions of `to`'s month first paid at or after `to`
    /// (in its month's sums, not in the report). Memory: one total per cohort, currency and
    /// purchase day.
    static func cohortSums(
        _ q: Query, last: Month, into cohorts: inout [Month: Cohort], revenue: inout [Month: Counts], on db: DatabaseConnection
    ) throws {
        let env = q.environment.rawValue
        let toDay = Timestamp(millisecondsSinceEpoch: q.to.millisecondsSinceEpoch - q.to.millisecondsSinceEpoch % SubscriptionStates.day)
        let read = { (row: SQLRow) throws(DatabaseError) in
            let month = Month(try row.timestamp("cohort"))
            cohorts[month, default: Cohort()].subscribers += try row.int64("members")
            try revenue[month, default: Counts()].addMoney(row)
        }
        try db.forEachRow(
            """
            SELECT c.cohort_month AS cohort, c.money_currency, c.money_day, SUM(c.members) AS members,
              \(unsafeRaw: moneyColumns.map { "SUM(c.\($0.column)) AS \($0.column)" }.joined(separator: ", "))
            FROM billing_cohort_sums c
            WHERE c.environment = \(env) AND c.cohort_month >= \(q.from) AND c.cohort_month <= \(last.start) AND c.day < \(toDay)
            GROUP BY c.cohort_month, c.money_currency, c.money_day
            """, read)
        let rows = """
            FROM billing_counted_events f
            JOIN billing_counted_events k ON k.environment = f.environment AND k.subscription_id = f.subscription_id
            """ as SQLQuery
        let grouped = "GROUP BY cohort, money_currency, money_day" as SQLQuery
        if toDay < q.to {
            try db.forEachRow(
                """
                SELECT \(unsafeRaw: SubscriptionStates.cohortMonthOf) AS cohort, \(unsafeRaw: moneyGroup),
                  \(unsafeRaw: SubscriptionStates.cohortRowSums(sign: 1))
                \(rows)
                WHERE f.environment = \(env) AND f.first_paid = 1 AND f.intrinsic_at >= \(q.from) AND f.intrinsic_at < \(q.to)
                  AND k.intrinsic_at >= \(toDay) AND k.intrinsic_at < \(q.to)
                \(grouped)
                """, read)
        }
        let next = (last + 1).start
        if q.to < next {
            try db.forEachRow(
                """
                SELECT \(unsafeRaw: SubscriptionStates.cohortMonthOf) AS cohort, \(unsafeRaw: moneyGroup),
                  \(unsafeRaw: SubscriptionStates.cohortRowSums(sign: -1))
                \(rows)
                WHERE f.environment = \(env) AND f.first_paid = 1 AND f.intrinsic_at >= \(q.to) AND f.intrinsic_at < \(next)
                  AND k.intrinsic_at < \(toDay)
                \(grouped)
                """, read)
        }
    }

    /// The cohorts' paying subscriptions at `boundaries` for a `from` that is a month's first
    /// instant: the counts the refresh keeps (`billing_cohort_paying`, sql/029), and the states
    /// longer than it holds read here. A cohort's subscriptions first paid at or after `to`
    /// cannot pay at a boundary after its month and not after `to`.
    static func cohortPaying(
        _ q: Query, last: Month, boundaries: [Month], into cohorts: inout [Month: Cohort], on db: DatabaseConnection
    ) throws {
        let env = q.environment.rawValue
        let reached = Set(boundaries)
        func count(_ cohort: Month, _ boundary: Month, _ n: Int64) {
            guard boundary > cohort, reached.contains(boundary) else { return }
            cohorts[cohort, default: Cohort()].paying[boundary.index - cohort.index, default: 0] += n
        }
        try db.forEachRow(
            """
            SELECT p.cohort_month, p.boundary, p.paying FROM billing_cohort_paying p
            WHERE p.environment = \(env) AND p.cohort_month >= \(q.from) AND p.cohort_month <= \(last.start)
              AND p.boundary > p.cohort_month AND p.boundary <= \(boundaries.last!.start)
            """
        ) { (row: SQLRow) throws(DatabaseError) in
            count(Month(try row.timestamp("cohort_month")), Month(try row.timestamp("boundary")), try row.int64("paying"))
        }
        try db.forEachRow(
            """
            SELECT s.cohort_paid_at, s.valid_from, s.active_until FROM billing_subscription_states s
            WHERE s.environment = \(env) AND s.span_class > \(Int64(SubscriptionStates.longestPayingClass))
              AND \(unsafeRaw: SubscriptionStates.paid) AND s.cohort_paid_at >= \(q.from) AND s.cohort_paid_at < \((last + 1).start)
            """
        ) { (row: SQLRow) throws(DatabaseError) in
            let cohort = Month(try row.timestamp("cohort_paid_at"))
            let validFrom = try row.timestamp("valid_from")
            let activeUntil = try row.timestamp("active_until")
            for boundary in boundaries where validFrom < boundary.start && boundary.start < activeUntil { count(cohort, boundary, 1) }
        }
    }

    /// `subscription_id, cohort` (the first day of the UTC month of its first paid period) of
    /// every subscription whose first paid period starts in [from, to): the classified events
    /// of that range flagged as their subscription's first paid period (billing_counted_events,
    /// sql/026).
    static func cohortMembers(_ q: Query) -> SQLQuery {
        """
        SELECT k.subscription_id, CAST(DATE_FORMAT(k.intrinsic_at, '%Y-%m-01') AS DATETIME(3)) AS cohort
        FROM billing_counted_events k
        WHERE k.environment = \(q.environment.rawValue) AND k.intrinsic_at >= \(q.from) AND k.intrinsic_at < \(q.to)
          AND k.first_paid = 1
        """
    }
}
