/// Gauges read from the database at scrape time (one short indexed query each), rendered
/// once per scrape without a `worker` label: they describe the installation, not a process.
///
/// - `billing_ingestion_lag_seconds`: now minus the intrinsic time of the newest applied
///   event, newest by receipt (`billing_events_status_received`): how stale what arrives is
///   (a provider that stopped delivering, or a backlog of retries, makes it grow);
/// - `billing_quarantine_open`: quarantined deliveries no one resolved yet;
/// - `billing_reconcile_lag_seconds{provider}`: how long the most overdue pull has been due
///   (0 when none is): the sweeper falling behind, or stopped;
/// - `billing_database_gauges_up`: 1 when the queries answered (0: the gauges above are absent).
enum DatabaseGauges {
    static let families: [MetricsExposition.Family] = [
        .init(
            name: "billing_database_gauges_up", type: "gauge",
            help: "1 when this scrape read the database gauges, 0 when the database did not answer."),
        .init(
            name: "billing_ingestion_lag_seconds", type: "gauge",
            help: "Now minus the intrinsic time of the newest applied event (newest by receipt)."),
        .init(name: "billing_quarantine_open", type: "gauge", help: "Quarantined deliveries not resolved yet (events.retryQuarantined)."),
        .init(
            name: "billing_reconcile_lag_seconds", type: "gauge",
            help: "How long the most overdue provider pull has been due, by provider (0: none overdue)."),
    ]

    static func samples(_ db: DatabaseConnection, now: Timestamp) -> [MetricSample] {
        do {
            var samples = [MetricSample("billing_database_gauges_up", [:], 1)]
            if let row = try db.queryOne(
                """
                SELECT intrinsic_at FROM billing_events WHERE status = 'applied' ORDER BY received_at DESC LIMIT 1
                """), let newest = try row.optionalTimestamp("intrinsic_at")
            {
                samples.append(MetricSample("billing_ingestion_lag_seconds", [:], seconds(now, since: newest)))
            }
            let open = try db.queryOne("SELECT COUNT(*) AS open FROM billing_quarantine WHERE resolved_at IS NULL")
            samples.append(MetricSample("billing_quarantine_open", [:], Double(try open?.int64("open") ?? 0)))
            var due: [String: Timestamp] = [:]
            for row in try db.query(
                """
                SELECT provider, MIN(next_attempt_at) AS due FROM billing_reconcile_state GROUP BY provider
                """)
            {
                due[try row.string("provider")] = try row.optionalTimestamp("due")
            }
            for provider in ["apple", "revenuecat"] {
                samples.append(
                    MetricSample(
                        "billing_reconcile_lag_seconds", ["provider": provider],
                        due[provider].map { max(0, seconds(now, since: $0)) } ?? 0))
            }
            return samples
        } catch {
            return [MetricSample("billing_database_gauges_up", [:], 0)]
        }
    }

    private static func seconds(_ now: Timestamp, since then: Timestamp) -> Double {
        Double(now.millisecondsSinceEpoch - then.millisecondsSinceEpoch) / 1000
    }
}
