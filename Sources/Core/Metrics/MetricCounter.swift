import Glibc
import Synchronization

/// One monotonically increasing counter: a relaxed atomic add on the hot path, no lock.
final class MetricCounter: Sendable {
    private let value = Atomic<Int>(0)

    init() {}

    func add(_ amount: Int = 1) { value.add(amount, ordering: .relaxed) }
    var current: Int { value.load(ordering: .relaxed) }
}

/// A gauge that goes up and down (busy threads).
final class MetricGauge: Sendable {
    private let value = Atomic<Int>(0)

    init() {}

    func increment() { value.add(1, ordering: .relaxed) }
    func decrement() { value.subtract(1, ordering: .relaxed) }
    func set(_ newValue: Int) { value.store(newValue, ordering: .relaxed) }
    var current: Int { value.load(ordering: .relaxed) }
}

/// A latency histogram with fixed bucket bounds (seconds); observations are microseconds,
/// so every field is an integer atomic.
final class MetricHistogram: Sendable {
    /// Upper bounds in seconds (Prometheus `le`), without `+Inf`.
    static let defaultBounds: [Double] = [0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10]

    let bounds: [Double]
    private let boundsMicroseconds: [Int]
    /// Non-cumulative counts per bucket; the last one is `+Inf`.
    private let buckets: [MetricCounter]
    private let sumMicroseconds = MetricCounter()
    private let observations = MetricCounter()

    init(bounds: [Double] = MetricHistogram.defaultBounds) {
        self.bounds = bounds
        self.boundsMicroseconds = bounds.map { Int(($0 * 1_000_000).rounded()) }
        self.buckets = (0...bounds.count).map { _ in MetricCounter() }
    }

    func observe(microseconds: Int) {
        let value = max(0, microseconds)
        var index = boundsMicroseconds.count
        for (i, bound) in boundsMicroseconds.enumerated() where value <= bound {
            index = i
            break
        }
        buckets[index].add()
        sumMicroseconds.add(value)
        observations.add()
    }

    /// Cumulative counts per bound, then `+Inf`; sum in seconds; count.
    var snapshot: (cumulative: [Int], sumSeconds: Double, count: Int) {
        var running = 0
        var cumulative: [Int] = []
        for bucket in buckets {
            running += bucket.current
            cumulative.append(running)
        }
        return (cumulative, Double(sumMicroseconds.current) / 1_000_000, observations.current)
    }
}

/// Microseconds of the monotonic clock, for request latency.
func monotonicMicroseconds() -> Int {
    var ts = timespec()
    clock_gettime(CLOCK_MONOTONIC, &ts)
    return Int(ts.tv_sec) * 1_000_000 + Int(ts.tv_nsec) / 1000
}
