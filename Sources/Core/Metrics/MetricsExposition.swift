/// One sample: a metric name (with `_bucket`/`_sum`/`_count` for histograms), its labels
/// and value.
struct MetricSample: Sendable, Equatable {
    var name: String
    var labels: [(String, String)]
    var value: Double

    init(_ name: String, _ labels: KeyValuePairs<String, String>, _ value: Double) {
        self.name = name
        self.labels = labels.map { ($0.key, $0.value) }
        self.value = value
    }

    init(name: String, labels: [(String, String)], value: Double) {
        self.name = name
        self.labels = labels
        self.value = value
    }

    static func == (lhs: MetricSample, rhs: MetricSample) -> Bool {
        lhs.name == rhs.name && lhs.value == rhs.value
            && lhs.labels.map(\.0) == rhs.labels.map(\.0) && lhs.labels.map(\.1) == rhs.labels.map(\.1)
    }

    /// Prometheus number formatting: integers without a fraction, `+Inf`, `NaN`.
    static func format(_ value: Double) -> String {
        if value.isNaN { return "NaN" }
        if value.isInfinite { return value > 0 ? "+Inf" : "-Inf" }
        if value == value.rounded(), abs(value) < 1e15 { return String(Int64(value)) }
        return String(value)
    }
}

/// A worker's published state: identity, liveness, and all its samples.
struct WorkerSnapshot: Sendable, Equatable {
    var worker: String
    var pid: Int
    var startedAt: Timestamp
    var publishedAt: Timestamp
    var threads: Int
    var busy: Int
    var requestsServed: Int
    var samples: [MetricSample]

    var json: JSON {
        [
            "worker": .string(worker), "pid": .int(Int64(pid)), "startedAt": .string(startedAt.iso8601),
            "startedAtMs": .int(startedAt.millisecondsSinceEpoch), "publishedAtMs": .int(publishedAt.millisecondsSinceEpoch),
            "threads": .int(Int64(threads)), "busy": .int(Int64(busy)), "requestsServed": .int(Int64(requestsServed)),
            // [name, [key, value, key, value, ...], value]: labels keep their order.
            "samples": .array(
                samples.map { sample in
                    [.string(sample.name), .array(sample.labels.flatMap { [JSON.string($0.0), JSON.string($0.1)] }), .double(sample.value)]
                }),
        ]
    }

    /// Reads `json` (as written by `json`); nil when it is not a snapshot.
    init?(json: JSON) {
        guard let worker = json["worker"]?.stringValue, let pid = json["pid"]?.intValue,
            let started = json["startedAtMs"]?.int64Value, let published = json["publishedAtMs"]?.int64Value,
            let threads = json["threads"]?.intValue, let busy = json["busy"]?.intValue,
            let served = json["requestsServed"]?.intValue, let rawSamples = json["samples"]?.arrayValue
        else { return nil }
        var samples: [MetricSample] = []
        for raw in rawSamples {
            guard let name = raw[0]?.stringValue, let flat = raw[1]?.arrayValue?.compactMap(\.stringValue),
                flat.count % 2 == 0, let value = raw[2]?.doubleValue
            else { return nil }
            let labels = stride(from: 0, to: flat.count, by: 2).map { (flat[$0], flat[$0 + 1]) }
            samples.append(MetricSample(name: name, labels: labels, value: value))
        }
        self.init(
            worker: worker, pid: pid, startedAt: Timestamp(millisecondsSinceEpoch: started),
            publishedAt: Timestamp(millisecondsSinceEpoch: published), threads: threads, busy: busy,
            requestsServed: served, samples: samples)
    }

    init(
        worker: String, pid: Int, startedAt: Timestamp, publishedAt: Timestamp, threads: Int, busy: Int,
        requestsServed: Int, samples: [MetricSample]
    ) {
        self.worker = worker
        self.pid = pid
        self.startedAt = startedAt
        self.publishedAt = publishedAt
        self.threads = threads
        self.busy = busy
        self.requestsServed = requestsServed
        self.samples = samples
    }

    /// For `system.health` and `scripts/workerctl status`.
    func summary(now: Timestamp) -> JSON {
        [
            "worker": .string(worker), "pid": .int(Int64(pid)), "startedAt": .string(startedAt.iso8601),
            "uptimeSeconds": .int(max(0, now.millisecondsSinceEpoch - startedAt.millisecondsSinceEpoch) / 1000),
            "threads": .int(Int64(threads)), "busy": .int(Int64(busy)), "requestsServed": .int(Int64(requestsServed)),
            "publishedAgoMs": .int(max(0, now.millisecondsSinceEpoch - publishedAt.millisecondsSinceEpoch)),
        ]
    }
}

/// The Prometheus text exposition (format 0.0.4) of several workers' snapshots: each
/// family once with its HELP and TYPE, every sample labelled with its `worker`.
enum MetricsExposition {
    static let contentType = "text/plain; version=0.0.4; charset=utf-8"

    struct Family: Sendable {
        let name: String
        let type: String
        let help: String
    }

    /// Every family a worker publishes, in exposition order.
    static let families: [Family] =
        [
            Family(name: "billing_http_requests_total", type: "counter", help: "Requests answered, by route pattern and HTTP status."),
            Family(
                name: "billing_http_request_duration_seconds", type: "histogram", help: "Time from accept to the last byte written, by route pattern."
            ),
            Family(
                name: "billing_webhook_events_total", type: "counter",
                help:
                    "Webhook deliveries and posted transactions by provider and outcome (applied, duplicate, unmatched, ignored, quarantined, rejected)."
            ),
            Family(
                name: "billing_usage_decisions_total", type: "counter",
                help: "POST /billing/usage decisions: allowed, over_limit (recorded in observe mode), refused (402)."),
            Family(name: "billing_db_errors_total", type: "counter", help: "Database errors that reached a request, by kind."),
            Family(name: "billing_db_retries_total", type: "counter", help: "Transactions re-run after a deadlock or lock wait timeout."),
            Family(
                name: "billing_offer_signatures_total", type: "counter",
                help: "App Store offer signatures (promotional, introductory eligibility): signed, or refused with 403 offer_not_eligible."),
            Family(
                name: "billing_entitlement_tokens_total", type: "counter",
                help: "Entitlement tokens signed (GET /billing/access?signed=true)."),
            Family(
                name: "billing_snapshot_cache_total", type: "counter",
                help: "GET /billing/access served from the worker's snapshot cache (hit) or read in full (miss)."),
            Family(name: "billing_worker_threads", type: "gauge", help: "Threads (and database connections) of the worker process."),
            Family(name: "billing_worker_busy_threads", type: "gauge", help: "Threads serving a request right now (the rest are idle in accept)."),
            Family(name: "billing_worker_requests_served_total", type: "counter", help: "Requests served since the worker process started."),
            Family(name: "billing_worker_start_time_seconds", type: "gauge", help: "Start time of the worker process, seconds since the epoch."),
            Family(name: "billing_auth_keys", type: "gauge", help: "ID-token signing keys in force (auth.keysUrl or auth.keysFile)."),
            Family(
                name: "billing_auth_keys_age_seconds", type: "gauge",
                help: "Seconds since the key set in force was fetched from auth.keysUrl (or read from auth.keysFile)."),
            Family(name: "billing_auth_keys_fetches_total", type: "counter", help: "Fetches of auth.keysUrl, by outcome (ok, error)."),
            Family(
                name: "billing_auth_keys_consecutive_fetch_errors", type: "gauge",
                help: "Fetches of auth.keysUrl failed in a row since the last good one (the last good keys stay in force)."),
        ] + ProcessStats.families

    private static func family(of sampleName: String) -> String {
        for suffix in ["_bucket", "_sum", "_count"] where sampleName.hasSuffix(suffix) {
            let base = String(sampleName.dropLast(suffix.count))
            if families.contains(where: { $0.name == base && $0.type == "histogram" }) { return base }
        }
        return sampleName
    }

    static func render(_ snapshots: [WorkerSnapshot]) -> String {
        var byFamily: [String: [String]] = [:]
        var pidLines: [String] = []
        for snapshot in snapshots.sorted(by: { $0.worker < $1.worker }) {
            for sample in snapshot.samples {
                let labels = [("worker", snapshot.worker)] + sample.labels
                byFamily[family(of: sample.name), default: []].append(line(sample.name, labels, sample.value))
            }
            pidLines.append(line("billing_worker_info", [("worker", snapshot.worker), ("pid", String(snapshot.pid))], 1))
        }
        var text = "# HELP billing_metrics_workers Worker processes whose fresh snapshot this scrape aggregated.\n"
        text += "# TYPE billing_metrics_workers gauge\n"
        text += "billing_metrics_workers \(snapshots.count)\n"
        text += "# HELP billing_worker_info Worker process identity (value 1).\n# TYPE billing_worker_info gauge\n"
        for line in pidLines { text += line }
        return text + familiesText(families, byFamily)
    }

    /// Samples without a `worker` label, each family once with its HELP and TYPE (billing-rpc's
    /// own counters: `subscriptions.reconcileStatus`).
    static func render(_ samples: [MetricSample], families: [Family]) -> String {
        var byFamily: [String: [String]] = [:]
        for sample in samples { byFamily[sample.name, default: []].append(line(sample.name, sample.labels, sample.value)) }
        return familiesText(families, byFamily)
    }

    private static func familiesText(_ families: [Family], _ byFamily: [String: [String]]) -> String {
        var text = ""
        for family in families {
            text += "# HELP \(family.name) \(family.help)\n# TYPE \(family.name) \(family.type)\n"
            for line in byFamily[family.name] ?? [] { text += line }
        }
        return text
    }

    private static func line(_ name: String, _ labels: [(String, String)], _ value: Double) -> String {
        let rendered = labels.map { "\($0.0)=\"\(escape($0.1))\"" }.joined(separator: ",")
        return labels.isEmpty ? "\(name) \(MetricSample.format(value))\n" : "\(name){\(rendered)} \(MetricSample.format(value))\n"
    }

    /// Label values escape backslash, double quote and newline.
    static func escape(_ value: String) -> String {
        var out = ""
        for character in value {
            switch character {
            case "\\": out += "\\\\"
            case "\"": out += "\\\""
            case "\n": out += "\\n"
            default: out.append(character)
            }
        }
        return out
    }
}
