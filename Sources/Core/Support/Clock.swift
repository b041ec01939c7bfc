import Glibc

/// Where "now" comes from. Production uses `SystemClock`; tests inject `FixedClock` so
/// that expiry, windows and phases are computed against a known instant.
protocol BillingClock: Sendable {
    func now() -> Timestamp
}

struct SystemClock: BillingClock {
    init() {}

    func now() -> Timestamp {
        var ts = timespec()
        clock_gettime(CLOCK_REALTIME, &ts)
        return Timestamp(millisecondsSinceEpoch: Int64(ts.tv_sec) * 1000 + Int64(ts.tv_nsec) / 1_000_000)
    }
}

struct FixedClock: BillingClock {
    let instant: Timestamp
    init(_ instant: Timestamp) { self.instant = instant }
    func now() -> Timestamp { instant }
}

/// Monotonic milliseconds for measuring durations (latency, timeouts); never for dates.
func monotonicMilliseconds() -> Int64 {
    var ts = timespec()
    clock_gettime(CLOCK_MONOTONIC, &ts)
    return Int64(ts.tv_sec) * 1000 + Int64(ts.tv_nsec) / 1_000_000
}
