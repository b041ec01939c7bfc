/// `GET /metrics` of a worker (nginx serves it only to 127.0.0.1): the Prometheus text of
/// every live worker, read from the metrics directory, with this worker's own counters
/// taken live rather than from its last published file.
enum MetricsRoute {
    static let path = "/metrics"

    static func handler<Context: RequestContextProtocol>(own: WorkerMetrics, directory: MetricsDirectory,
                                                         clock: any BillingClock) -> RouteHandler<Context> {
        { _, _ in
            let now = clock.now()
            var snapshots = directory.readAll(now: now).filter { $0.worker != own.worker }
            snapshots.append(own.snapshot(now: now))
            var response = HTTPResponse(status: .ok, body: Array(MetricsExposition.render(snapshots).utf8))
            response.headers["Content-Type"] = MetricsExposition.contentType
            response.headers["Cache-Control"] = "no-store"
            return response
        }
    }
}
