/// The cohorts' sums (sql/028 `billing_cohort_sums`, docs/stats.md "Cohorts"): what each
/// cohort's classified events add to `stats.cohorts` (its subscribers and `moneyColumns`) per
/// UTC day, currency and purchase day, so that a report from a month's first instant reads one
/// row per cohort, day, currency and purchase day instead of joining every member's events.
/// The refresh keeps them equal to the rows as it keeps the buckets: a chunk's sums out before
/// its rows are replaced or added, back in after, in the same transaction.
extension SubscriptionStates {
    /// The cohort month of a classified row (alias f: its subscription's first_paid row).
    static let cohortMonthOf = "CAST(DATE_FORMAT(f.intrinsic_at, '%Y-%m-01') AS DATE)"

    /// `sums` of the cohort rows (alias k), grouped by `cohortRowsGroup`: the subscribers and
    /// the money, each negated when `sign` < 0.
    static func cohortRowSums(sign: Int) -> String {
        let minus = sign < 0 ? "-" : ""
        return "\(minus)SUM(k.first_paid) AS members, "
            + SubscriptionStats.moneyColumns.map { "\(minus)SUM(\($0.expression)) AS \($0.column)" }.joined(separator: ", ")
    }

    /// Adds to their cohort sums (`sign` 1) or takes out (−1) the classified rows of up to
    /// `chunk` subscriptions of one environment, from `from` on (nil: all of them). A
    /// subscription without a first paid row yet is in no cohort and adds nothing.
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
            FROM billing_counted_events f
            JOIN billing_counted_events k ON k.environment = f.environment AND k.subscription_id = f.subscription_id
            WHERE f.environment = \(env) AND f.subscription_id IN (\(list: padded(subscriptions.map(SQLValue.string))))
              AND f.first_paid = 1 \(since)
            GROUP BY cohort, day, money_currency, money_day
            ON DUPLICATE KEY UPDATE \(unsafeRaw: columns.map { "\($0) = \($0) + VALUES(\($0))" }.joined(separator: ", "))
            """)
    }
}
