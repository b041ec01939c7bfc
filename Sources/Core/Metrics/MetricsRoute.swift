/// `GET /metrics` of a worker (nginx serves it only to 127.0.0.1): the Prometheus text of
/// every live worker, read from the metrics directory, with this worker's own counters
/// taken live rather than from its last published file.
public enum MetricsRoute {
    public static let path = "/metrics"

    public static func handler(own: WorkerMetrics, directory: MetricsDirectory) -> RouteHandler {
        { _, context in
            let now = context.clock.now()
            var snapshots = directory.readAll(now: now).filter { $0.worker != own.worker }
            snapshots.append(own.snapshot(now: now))
            var response = HTTPResponse(status: .ok, body: Array(MetricsExposition.render(snapshots).utf8))
            response.headers["Content-Type"] = MetricsExposition.contentType
            response.headers["Cache-Control"] = "no-store"
            return response
        }
    }
}
