/// The cohorts' sums (sql/028 `billing_cohort_sums`, docs/stats.md "Cohorts"): what each
/// cohort's classified events add to `stats.cohorts` (its subscribers and `moneyColumns`) per
/// UTC day, currency and purchase day, so that a report from a month's first instant reads one
/// row per cohort, day, currency and purchase day instead of joining every member's events.
/// The refresh keeps them equal to the rows as it keeps the buckets: a chunk's sums out before
/// its rows are replaced or added, back in after, in the same transaction.
extension SubscriptionStates {
    /// The cohort month of a classified row (alias f: its subscription's first_paid row).
    static let cohortMonthOf = "CAST(DATE_FORMAT(f.intrinsic_at, '%Y-%m-01') AS DATE)"

    /// The sums of classified rows (alias k) for the cohorts' sums: the subscribers (first
    /// paid rows) and `moneyColumns`, each negated when `sign` < 0.
    static func cohortRowSums(sign: Int) -> String {
        let minus = sign < 0 ? "-" : ""
        return "\(minus)SUM(k.first_paid) AS members, "
            + SubscriptionStats.moneyColumns.map { "\(minus)SUM(\($0.expression)) AS \($0.column)" }.joined(separator: ", ")
    }

    /// Adds to their cohort sums (`sign` 1) or takes out (−1) the classified rows of up to
    /// `chunk` subscriptions of one environment, from `from` on (nil: all of them). A
    /// subscription without a first paid row yet is in no cohort and adds nothing.
    /// Both sides by the subscription index (`FORCE INDEX`), in the order MariaDB picks: the
    /// chunk's rows from `from` on first when they are few (the index ends in the primary
    /// key's `intrinsic_at`), else each first paid row and then its rows. Left to itself
    /// MariaDB at times took every row after `from` by the primary key and looked up each
    /// one's first paid row (over a million rows examined for 64 subscriptions on the dev
    /// database, past the statement limit, the refresh failing at that chunk on every try);
    /// and with only the join order forced it read the first paid rows by the primary key's
    /// `environment` prefix: the whole table, for every chunk.
    static func addToCohortSums(
        _ sign: Int, subscriptions: [String], environment env: String, from: Timestamp?, on db: DatabaseConnection
    ) throws {
        guard !subscriptions.isEmpty else { return }
        let since: SQLQuery = from.map { "AND k.intrinsic_at >= \($0)" } ?? ""
        let columns = ["members"] + SubscriptionStats.moneyColumns.map(\.column)
        try db.execute(
            """
            INSERT INTO billing_cohort_sums (environment, cohort_month, day, money_currency, money_day,
              \(unsafeRaw: columns.joined(separator: ", ")))
            SELECT \(env), \(unsafeRaw: cohortMonthOf) AS cohort, DATE(k.intrinsic_at) AS day, \(unsafeRaw: SubscriptionStats.moneyGroup),
              \(unsafeRaw: cohortRowSums(sign: sign))
            FROM billing_counted_events f FORCE INDEX (billing_counted_events_subscription)
            JOIN billing_counted_events k FORCE INDEX (billing_counted_events_subscription)
              ON k.environment = f.environment AND k.subscription_id = f.subscription_id
            WHERE f.environment = \(env) AND f.subscription_id IN (\(list: padded(subscriptions.map(SQLValue.string))))
              AND f.first_paid = 1 \(since)
            GROUP BY cohort, day, money_currency, money_day
            ON DUPLICATE KEY UPDATE \(unsafeRaw: columns.map { "\($0) = \($0) + VALUES(\($0))" }.joined(separator: ", "))
            """)
    }
}

/// The cohorts' paying subscriptions at each month boundary (sql/029 `billing_cohort_paying`,
/// docs/stats.md "Cohorts"): a paying state (`paid`) of a subscription with a cohort counts at
/// every first instant of a UTC month it is active at, so that `stats.cohorts`' retention reads
/// one row per cohort and boundary instead of the paying set of every boundary. The refresh
/// counts the states it deletes out and those it writes in, in the same transaction. A state
/// longer than 2^`longestPayingClass` days counts nowhere here: the report reads those few from
/// the states themselves.
extension SubscriptionStates {
    static let longestPayingClass = 11

    /// What a refresh changes in `billing_cohort_paying`, per cohort month and boundary (month
    /// indexes, `SubscriptionStats.Month`).
    struct PayingChanges {
        var counts: [Pair: Int64] = [:]

        struct Pair: Hashable {
            var cohort: Int
            var boundary: Int
        }

        /// Counts a state in (`sign` 1) or out (−1) at the boundaries it is active at, when it
        /// pays, has a cohort and is not longer than the table holds.
        mutating func add(
            _ sign: Int64, cohortPaidAt: Int64?, validFrom: Int64, activeUntil: Int64, paid: Bool, spanClass: Int
        ) {
            guard paid, let cohortPaidAt, spanClass <= longestPayingClass else { return }
            let cohort = SubscriptionStats.Month(Timestamp(millisecondsSinceEpoch: cohortPaidAt)).index
            for boundary in SubscriptionStates.boundaries(validFrom: validFrom, activeUntil: activeUntil) {
                counts[Pair(cohort: cohort, boundary: boundary.index), default: 0] += sign
            }
        }

        mutating func add(_ sign: Int64, _ s: State, cohortPaidAt: Int64?) {
            add(
                sign, cohortPaidAt: cohortPaidAt, validFrom: s.validFrom, activeUntil: s.activeUntil,
                paid: !s.isTrial && !s.familyShared && (s.priceMilli ?? 0) > 0, spanClass: s.spanClass)
        }
    }

    /// The months whose first instant t has validFrom < t < activeUntil.
    static func boundaries(validFrom: Int64, activeUntil: Int64) -> [SubscriptionStats.Month] {
        var all: [SubscriptionStats.Month] = []
        var b = SubscriptionStats.Month(Timestamp(millisecondsSinceEpoch: validFrom)) + 1
        while b.start.millisecondsSinceEpoch < activeUntil {
            all.append(b)
            b = b + 1
        }
        return all
    }

    /// Counts out of `changes` the stored paying states of up to `chunk` subscriptions of one
    /// environment (before they are deleted or their cohort is set), or in (`sign` 1, after).
    static func countStoredPaying(
        _ sign: Int64, subscriptions: [String], environment env: String, into changes: inout PayingChanges,
        on db: DatabaseConnection
    ) throws {
        guard !subscriptions.isEmpty else { return }
        try db.forEachRow(
            """
            SELECT s.cohort_paid_at, s.valid_from, s.active_until, s.span_class FROM billing_subscription_states s
            WHERE s.environment = \(env) AND s.subscription_id IN (\(list: padded(subscriptions.map(SQLValue.string))))
              AND \(unsafeRaw: paid) AND s.cohort_paid_at IS NOT NULL AND s.span_class <= \(Int64(longestPayingClass))
            """
        ) { (row: SQLRow) throws(DatabaseError) in
            changes.add(
                sign, cohortPaidAt: try row.timestamp("cohort_paid_at").millisecondsSinceEpoch,
                validFrom: try row.timestamp("valid_from").millisecondsSinceEpoch,
                activeUntil: try row.timestamp("active_until").millisecondsSinceEpoch, paid: true,
                spanClass: Int(try row.int64("span_class")))
        }
    }

    /// Adds `changes` to `billing_cohort_paying`.
    static func apply(_ changes: PayingChanges, environment env: String, on db: DatabaseConnection) throws {
        let all = changes.counts.filter { $0.value != 0 }.sorted { ($0.key.cohort, $0.key.boundary) < ($1.key.cohort, $1.key.boundary) }
        try inChunks(all) { part in
            var values: SQLQuery = ""
            for (n, (pair, count)) in part.enumerated() {
                if n > 0 { values.append(", ") }
                let cohort = SubscriptionStats.Month(index: pair.cohort).start
                let boundary = SubscriptionStats.Month(index: pair.boundary).start
                values.append("(\(env), DATE(\(cohort)), DATE(\(boundary)), \(count))")
            }
            try db.execute(
                """
                INSERT INTO billing_cohort_paying (environment, cohort_month, boundary, paying) VALUES \(values)
                ON DUPLICATE KEY UPDATE paying = paying + VALUES(paying)
                """)
        }
    }
}
