import Glibc

/// The request-level metrics of one worker process: requests by route and status, latency
/// per route, busy threads and requests served. Routes are the router's patterns, known at
/// start-up, so the per-route tables are built once and only read afterwards (no lock).
final class WorkerMetrics: Sendable {
    /// Route label of a path that matched no route.
    static let unmatchedRoute = "unmatched"
    /// Statuses counted individually; anything else is counted under "other".
    static let statuses: [Int] = [200, 201, 202, 204, 304, 400, 401, 402, 403, 404, 405, 409, 413, 422, 429, 500, 501, 502, 503, 504]

    private final class RouteTable: Sendable {
        let byStatus: [MetricCounter]  // statuses, then "other"
        let latency = MetricHistogram()
        init() { byStatus = (0...WorkerMetrics.statuses.count).map { _ in MetricCounter() } }
    }

    /// `worker` label: the socket's file name without `.sock` (e.g. `worker-2`).
    let worker: String
    let threads: Int
    let processID: Int32
    let startedAt: Timestamp
    let busy = MetricGauge()
    let served = MetricCounter()
    private let routes: [String: RouteTable]
    private let routeOrder: [String]
    /// The domain layers' counters of this process, published beside the worker's own.
    let domain: BillingMetrics

    init(worker: String, threads: Int, routes: [String], startedAt: Timestamp, domain: BillingMetrics = BillingMetrics()) {
        self.domain = domain
        self.worker = worker
        self.threads = threads
        self.processID = getpid()
        self.startedAt = startedAt
        let order = routes + [WorkerMetrics.unmatchedRoute]
        var tables: [String: RouteTable] = [:]
        for route in order where tables[route] == nil { tables[route] = RouteTable() }
        self.routes = tables
        self.routeOrder = order.reduce(into: [String]()) { if !$0.contains($1) { $0.append($1) } }
    }

    /// The `worker` label for a socket path: `/run/x/worker-2.sock` → `worker-2`.
    static func workerName(socketPath: String) -> String {
        var name = socketPath.split(separator: "/").last.map(String.init) ?? socketPath
        if name.hasSuffix(".sock") { name.removeLast(5) }
        return name.isEmpty ? "worker" : name
    }

    /// Records one answered request. `route` is the matched pattern (or nil).
    func record(route: String?, status: Int, microseconds: Int) {
        let table = routes[route ?? WorkerMetrics.unmatchedRoute] ?? routes[WorkerMetrics.unmatchedRoute]!
        let index = WorkerMetrics.statuses.firstIndex(of: status) ?? WorkerMetrics.statuses.count
        table.byStatus[index].add()
        table.latency.observe(microseconds: microseconds)
    }

    /// Everything this process counts (its own and the domain's) as samples.
    func samples() -> [MetricSample] {
        var samples: [MetricSample] = []
        for route in routeOrder {
            let table = routes[route]!
            for (index, counter) in table.byStatus.enumerated() where counter.current > 0 {
                let status = index < WorkerMetrics.statuses.count ? String(WorkerMetrics.statuses[index]) : "other"
                samples.append(MetricSample("billing_http_requests_total", ["route": route, "status": status], Double(counter.current)))
            }
        }
        for route in routeOrder {
            let histogram = routes[route]!.latency.snapshot
            guard histogram.count > 0 else { continue }
            let bounds = routes[route]!.latency.bounds
            for (index, count) in histogram.cumulative.enumerated() {
                let le = index < bounds.count ? MetricSample.format(bounds[index]) : "+Inf"
                samples.append(MetricSample("billing_http_request_duration_seconds_bucket", ["route": route, "le": le], Double(count)))
            }
            samples.append(MetricSample("billing_http_request_duration_seconds_sum", ["route": route], histogram.sumSeconds))
            samples.append(MetricSample("billing_http_request_duration_seconds_count", ["route": route], Double(histogram.count)))
        }
        samples += domain.samples()
        samples.append(MetricSample("billing_worker_threads", [:], Double(threads)))
        samples.append(MetricSample("billing_worker_busy_threads", [:], Double(busy.current)))
        samples.append(MetricSample("billing_worker_requests_served_total", [:], Double(served.current)))
        samples.append(MetricSample("billing_worker_start_time_seconds", [:], Double(startedAt.millisecondsSinceEpoch) / 1000))
        samples += ProcessStats.samples(startedAt: startedAt)
        return samples
    }

    /// What is published to the metrics directory and read back by the metrics route,
    /// `system.health` and `scripts/workerctl status`.
    func snapshot(now: Timestamp) -> WorkerSnapshot {
        WorkerSnapshot(
            worker: worker, pid: Int(processID), startedAt: startedAt, publishedAt: now, threads: threads,
            busy: busy.current, requestsServed: served.current, samples: samples())
    }
}
