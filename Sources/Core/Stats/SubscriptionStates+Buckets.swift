/// The classified events' sums per 15-minute bucket (sql/026 `billing_counted_buckets`,
/// docs/stats.md "Classified events"): what each bucket's rows add to the counts
/// (`SubscriptionStats.eventSums`), per currency and purchase day, so that a report reads one
/// row per bucket, currency and day for the buckets that lie wholly inside one of its periods
/// instead of every event. The refresh keeps them equal to the sums of the rows: before it
/// replaces or adds a chunk's rows it takes their sums out, and after it puts them back in, in
/// the same transaction.
extension SubscriptionStates {
    /// A bucket's length: 15 minutes, so that a local day of any zone whose offset is a
    /// multiple of 15 minutes is made of whole buckets.
    static let bucketMilliseconds: Int64 = 900_000

    /// The start of a classified row's bucket (alias k), UTC.
    static let bucketOf = """
        TIMESTAMPADD(MINUTE, TIMESTAMPDIFF(MINUTE, TIMESTAMP'1000-01-01 00:00:00', k.intrinsic_at) DIV 15 * 15, \
        TIMESTAMP'1000-01-01 00:00:00')
        """

    /// Adds to their buckets (`sign` 1) or takes out (−1) the classified rows of up to `chunk`
    /// subscriptions of one environment, from `from` on (nil: all of them).
    static func addToBuckets(
        _ sign: Int, subscriptions: [String], environment env: String, from: Timestamp?, on db: DatabaseConnection
    ) throws {
        guard !subscriptions.isEmpty else { return }
        let columns = SubscriptionStats.eventSums
        let since: SQLQuery = from.map { "AND k.intrinsic_at >= \($0)" } ?? ""
        let sums = columns.map { "\(sign < 0 ? "-" : "")SUM(\($0.expression))" }.joined(separator: ", ")
        try db.execute(
            """
            INSERT INTO billing_counted_buckets (environment, bucket_at, money_currency, money_day,
              \(unsafeRaw: columns.map(\.column).joined(separator: ", ")))
            SELECT \(env), \(unsafeRaw: bucketOf) AS bucket, \(unsafeRaw: SubscriptionStats.moneyGroup), \(unsafeRaw: sums)
            FROM billing_counted_events k
            WHERE k.environment = \(env) AND k.subscription_id IN (\(list: padded(subscriptions.map(SQLValue.string)))) \(since)
            GROUP BY bucket, money_currency, money_day
            ON DUPLICATE KEY UPDATE \(unsafeRaw: columns.map { "\($0.column) = \($0.column) + VALUES(\($0.column))" }.joined(separator: ", "))
            """)
    }
}
