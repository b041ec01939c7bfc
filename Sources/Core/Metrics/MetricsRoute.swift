/// `GET /metrics` of a worker (nginx serves it only to 127.0.0.1): the Prometheus text of
/// every live worker, read from the metrics directory, with this worker's own counters
/// taken live rather than from its last published file.
enum MetricsRoute {
    static let path = "/metrics"

    /// `database`: the connection of the thread serving the scrape, for `DatabaseGauges`
    /// (nil: those gauges are left out).
    static func handler<Context: RequestContextProtocol>(
        own: WorkerMetrics, directory: MetricsDirectory, clock: any BillingClock,
        database: @escaping @Sendable (Context) -> DatabaseConnection? = { _ in nil }
    )
        -> RouteHandler<Context>
    {
        { _, context in
            let now = clock.now()
            var snapshots = directory.readAll(now: now).filter { $0.worker != own.worker }
            snapshots.append(own.snapshot(now: now))
            var text = MetricsExposition.render(snapshots)
            if let db = database(context) {
                text += MetricsExposition.render(DatabaseGauges.samples(db, now: now), families: DatabaseGauges.families)
            }
            var response = HTTPResponse(status: .ok, body: Array(text.utf8))
            response.headers["Content-Type"] = MetricsExposition.contentType
            response.headers["Cache-Control"] = "no-store"
            return response
        }
    }
}
