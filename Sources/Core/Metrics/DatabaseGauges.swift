/// Gauges read from the database at scrape time (one short indexed query each), rendered
/// once per scrape without a `worker` label: they describe the installation, not a process.
///
/// - `billing_ingestion_lag_seconds`: now minus the intrinsic time of the newest applied
///   event, newest by receipt (`billing_events_status_received`): how stale what arrives is
///   (a provider that stopped delivering, or a backlog of retries, makes it grow);
/// - `billing_quarantine_open`: quarantined deliveries no one resolved yet;
/// - `billing_reconcile_lag_seconds{provider}`: how long the most overdue pull has been due
///   (0 when none is): the sweeper falling behind, or stopped;
/// - `billing_webhook_lag_seconds{endpoint}`, `billing_webhook_retrying{endpoint}`,
///   `billing_webhook_failed{endpoint}`, `billing_webhook_attempts{endpoint}`: per endpoint
///   with deliveries not delivered, how long its oldest pending delivery has waited, how
///   many are being retried, how many failed for good, and the attempts spent on them;
/// - `billing_google_unacknowledged`, `billing_google_acknowledgement_deadline_seconds`: paid
///   Play purchases still to acknowledge, and how long until the earliest reaches Google's
///   three-day limit (after which Google refunds it);
/// - `billing_outbox_queued_seconds`: how long the oldest outbox row not fanned out has
///   waited (0 when none): no billing-rpc with endpoints is running, or it fell behind;
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
        .init(
            name: "billing_webhook_lag_seconds", type: "gauge",
            help: "How long the endpoint's oldest pending webhook delivery has waited (0: none pending)."),
        .init(name: "billing_webhook_retrying", type: "gauge", help: "Webhook deliveries of the endpoint failed at least once and retried."),
        .init(name: "billing_webhook_failed", type: "gauge", help: "Webhook deliveries of the endpoint that failed for good (webhooks.replay)."),
        .init(
            name: "billing_webhook_attempts", type: "gauge",
            help: "Attempts made for the endpoint's deliveries not delivered yet (pending or failed)."),
        .init(
            name: "billing_google_unacknowledged", type: "gauge",
            help: "Paid Google Play purchases not acknowledged yet (Google refunds them three days after their start)."),
        .init(
            name: "billing_google_acknowledgement_deadline_seconds", type: "gauge",
            help: "Seconds until the earliest unacknowledged Play purchase reaches Google's three-day limit (negative: passed; 0: none waiting)."),
        .init(
            name: "billing_outbox_queued_seconds", type: "gauge",
            help: "How long the oldest outbox row not yet fanned out to the webhook endpoints has waited (0: none)."),
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
            for provider in ["apple", "revenuecat", "google"] {
                samples.append(
                    MetricSample(
                        "billing_reconcile_lag_seconds", ["provider": provider],
                        due[provider].map { max(0, seconds(now, since: $0)) } ?? 0))
            }
            for row in try db.query(
                """
                SELECT endpoint_id, MIN(IF(status = 'pending', created_at, NULL)) AS oldest,
                  SUM(status = 'pending' AND attempts > 0) AS retrying, SUM(status = 'failed') AS failed,
                  SUM(attempts) AS attempts
                FROM billing_webhook_deliveries WHERE status IN ('pending', 'failed') GROUP BY endpoint_id
                """)
            {
                let endpoint = try row.string("endpoint_id")
                let oldest = try row.optionalTimestamp("oldest")
                samples.append(
                    MetricSample("billing_webhook_lag_seconds", ["endpoint": endpoint], oldest.map { max(0, seconds(now, since: $0)) } ?? 0))
                samples.append(MetricSample("billing_webhook_retrying", ["endpoint": endpoint], Double(try row.optionalInt64("retrying") ?? 0)))
                samples.append(MetricSample("billing_webhook_failed", ["endpoint": endpoint], Double(try row.optionalInt64("failed") ?? 0)))
                samples.append(MetricSample("billing_webhook_attempts", ["endpoint": endpoint], Double(try row.optionalInt64("attempts") ?? 0)))
            }
            // Paid states (GooglePlayIngestion.acknowledgeableStates), within the three days
            // and one more (GooglePlayIngestion.unacknowledged: what the sweeper still tries).
            let play = try db.queryOne(
                """
                SELECT COUNT(*) AS waiting, MIN(started_at) AS oldest FROM billing_google_purchases
                WHERE acknowledged_at IS NULL AND started_at > \(now.adding(milliseconds: -4 * 86_400_000))
                  AND state IN ('SUBSCRIPTION_STATE_ACTIVE', 'SUBSCRIPTION_STATE_IN_GRACE_PERIOD', 'SUBSCRIPTION_STATE_CANCELED',
                                'SUBSCRIPTION_STATE_ON_HOLD', 'SUBSCRIPTION_STATE_PAUSED', 'PURCHASED')
                """)
            samples.append(MetricSample("billing_google_unacknowledged", [:], Double(try play?.int64("waiting") ?? 0)))
            let limit = try play?.optionalTimestamp("oldest")?.adding(milliseconds: 3 * 86_400_000)
            samples.append(
                MetricSample(
                    "billing_google_acknowledgement_deadline_seconds", [:],
                    limit.map { Double($0.millisecondsSinceEpoch - now.millisecondsSinceEpoch) / 1000 } ?? 0))
            let queued = try db.queryOne("SELECT created_at FROM billing_outbox WHERE fanned_out_at IS NULL ORDER BY id LIMIT 1")
            samples.append(
                MetricSample(
                    "billing_outbox_queued_seconds", [:], try queued?.optionalTimestamp("created_at").map { max(0, seconds(now, since: $0)) } ?? 0))
            return samples
        } catch {
            return [MetricSample("billing_database_gauges_up", [:], 0)]
        }
    }

    private static func seconds(_ now: Timestamp, since then: Timestamp) -> Double {
        Double(now.millisecondsSinceEpoch - then.millisecondsSinceEpoch) / 1000
    }
}
