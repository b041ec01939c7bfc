/// `GET /api/v1/health`: liveness of this worker and readiness of its database connection
/// (one `SELECT 1` on the thread's connection).
/// 200 `{"status":"ok","database":"ok",...}`, or 503 `{"status":"unavailable","database":"down",...}`
/// so a load balancer or `scripts/` can wait for readiness. The probe's error text is not
/// returned (it may name hosts or users).
struct HealthCheck: Sendable {
    /// What the health route needs of its request context: the thread's own state.
    protocol Context: RequestContextProtocol {
        var clock: any BillingClock { get }
        /// Checks the thread's database (one statement); nil when the worker runs without one.
        var databaseProbe: (() throws -> Void)? { get }
    }

    let metrics: BillingMetrics

    func handle(_ request: HTTPRequest, _ context: some Context) -> HTTPResponse {
        let started = monotonicMilliseconds()
        let database: String
        var healthy = true
        if let probe = context.databaseProbe {
            do {
                try probe()
                database = "ok"
            } catch {
                metrics.databaseError(from: error)
                database = "down"
                healthy = false
            }
        } else {
            database = "not_configured"
        }
        let body: JSON = [
            "status": healthy ? "ok" : "unavailable",
            "database": .string(database),
            "time": .string(context.clock.now().iso8601),
            "checkMilliseconds": .int(monotonicMilliseconds() - started),
        ]
        return .json(healthy ? .ok : .serviceUnavailable, body)
    }

    /// `GET /api/v1/ping`: `{"ok":true}` without touching the database (benchmarks, liveness).
    static func ping(_ request: HTTPRequest, _ context: some RequestContextProtocol) -> HTTPResponse {
        pingResponse
    }

    private static let pingResponse = HTTPResponse.json(.ok, ["ok": true])
}
