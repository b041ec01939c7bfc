import Synchronization

/// The counters of reconciliation in billing-rpc (SPEC §11, §15): pulls by outcome,
/// subscriptions corrected, API errors by status — over both providers, and per provider
/// (`provider` apple, revenuecat or google) — and the sweep lag (how long the most overdue
/// subscription of the last sweep had been waiting). `subscriptions.reconcileStatus`
/// reports them, with the Prometheus names below.
final class ReconcileMetrics: Sendable {
    enum Outcome: String, Sendable, CaseIterable {
        case unchanged, corrected, failed
        case rateLimited = "rate_limited"
    }

    private let pulls = Outcome.allCases.map { _ in MetricCounter() }
    private let apiErrors = Mutex<[String: Int]>([:])
    /// Per provider: pulls by outcome, and API errors by status.
    private let providerPulls = Mutex<[String: Int]>([:])
    private let providerErrors = Mutex<[String: Int]>([:])
    let sweeps = MetricCounter()
    let sweepLagSeconds = MetricGauge()

    init() {}

    func pulled(_ outcome: Outcome, provider: ReconcileProvider = .apple) {
        pulls[Outcome.allCases.firstIndex(of: outcome)!].add()
        providerPulls.withLock { $0["\(provider.rawValue)\u{1F}\(outcome.rawValue)", default: 0] += 1 }
    }

    func apiError(_ error: ProviderAPIError, provider: ReconcileProvider = .apple) {
        apiErrors.withLock { $0[error.statusLabel, default: 0] += 1 }
        providerErrors.withLock { $0["\(provider.rawValue)\u{1F}\(error.statusLabel)", default: 0] += 1 }
    }

    private static func split(_ key: String) -> (String, String) {
        let parts = key.split(separator: "\u{1F}", maxSplits: 1).map(String.init)
        return (parts[0], parts.count > 1 ? parts[1] : "")
    }

    func samples() -> [MetricSample] {
        var samples = Outcome.allCases.enumerated().map { index, outcome in
            MetricSample("billing_reconcile_pulls_total", ["outcome": outcome.rawValue], Double(pulls[index].current))
        }
        samples.append(
            MetricSample(
                "billing_reconcile_corrected_total", [:],
                Double(pulls[Outcome.allCases.firstIndex(of: .corrected)!].current)))
        for (status, count) in apiErrors.withLock({ $0 }).sorted(by: { $0.key < $1.key }) {
            samples.append(MetricSample(name: "billing_reconcile_api_errors_total", labels: [("status", status)], value: Double(count)))
        }
        for (key, count) in providerPulls.withLock({ $0 }).sorted(by: { $0.key < $1.key }) {
            let (provider, outcome) = Self.split(key)
            samples.append(
                MetricSample(
                    name: "billing_reconcile_provider_pulls_total",
                    labels: [("provider", provider), ("outcome", outcome)], value: Double(count)))
        }
        for (key, count) in providerErrors.withLock({ $0 }).sorted(by: { $0.key < $1.key }) {
            let (provider, status) = Self.split(key)
            samples.append(
                MetricSample(
                    name: "billing_reconcile_provider_api_errors_total",
                    labels: [("provider", provider), ("status", status)], value: Double(count)))
        }
        samples.append(MetricSample("billing_reconcile_sweeps_total", [:], Double(sweeps.current)))
        samples.append(MetricSample("billing_reconcile_sweep_lag_seconds", [:], Double(sweepLagSeconds.current)))
        return samples
    }

    static let families: [MetricsExposition.Family] = [
        .init(
            name: "billing_reconcile_pulls_total", type: "counter",
            help:
                "Pulls from the App Store Server API, RevenueCat's REST API and the Play Developer API by outcome (unchanged, corrected, failed, rate_limited)."
        ),
        .init(name: "billing_reconcile_corrected_total", type: "counter", help: "Pulls that changed a subscription's folded state."),
        .init(
            name: "billing_reconcile_api_errors_total", type: "counter",
            help: "Failed pulls by HTTP status, or timeout, transport, verification, malformed."),
        .init(
            name: "billing_reconcile_provider_pulls_total", type: "counter",
            help: "Pulls by provider (apple: App Store Server API, revenuecat: RevenueCat REST API, google: Play Developer API) and outcome."),
        .init(
            name: "billing_reconcile_provider_api_errors_total", type: "counter",
            help: "Failed pulls by provider and HTTP status, or timeout, transport, verification, malformed."),
        .init(name: "billing_reconcile_sweeps_total", type: "counter", help: "Sweeps run by this billing-rpc."),
        .init(
            name: "billing_reconcile_sweep_lag_seconds", type: "gauge",
            help: "How long the most overdue subscription of the last sweep had waited past its due time."),
    ]

    /// The Prometheus text of `samples()` (for a node exporter's textfile collector).
    var prometheus: String { MetricsExposition.render(samples(), families: Self.families) }

    var json: JSON {
        .array(
            samples().map { sample in
                [
                    "name": .string(sample.name), "labels": .object(JSONObject(sample.labels.map { ($0.0, JSON.string($0.1)) })),
                    "value": .double(sample.value),
                ]
            })
    }
}

/// Apple's rate limit is the app's, not one subscription's: after a 429 whose Retry-After a
/// call could not wait out, the sweeper pulls nothing before that time (a pull on demand
/// still asks, and learns the same answer).
final class ReconcilePause: Sendable {
    private let until = Mutex<Timestamp?>(nil)

    init() {}

    func pause(until time: Timestamp) {
        until.withLock { current in if current.map({ $0 < time }) ?? true { current = time } }
    }

    /// Whether the sweeper must wait at `now`.
    func isPaused(at now: Timestamp) -> Bool {
        until.withLock { current in current.map { $0 > now } ?? false }
    }
}
