import Glibc

/// Exponential backoff with jitter, the one rule for every wait after a failure: between
/// the attempts of one API call (5xx, timeouts) and between the pulls of one subscription
/// after failed pulls. Attempt n (1-based) waits `min(cap, base · 2^(n-1))`, of which a
/// random half is jitter ("equal jitter": never less than half the nominal wait, so a
/// crowd of callers spreads out without any of them hammering).
struct RetrySchedule: Sendable, Equatable {
    var baseMilliseconds: Int64
    var capMilliseconds: Int64

    init(baseMilliseconds: Int64, capMilliseconds: Int64) {
        self.baseMilliseconds = max(1, baseMilliseconds)
        self.capMilliseconds = max(self.baseMilliseconds, capMilliseconds)
    }

    /// The nominal wait after failure number `attempt` (1-based), before jitter.
    func nominal(attempt: Int) -> Int64 {
        let doublings = min(max(attempt, 1) - 1, 40)
        let (wait, overflow) = baseMilliseconds.multipliedReportingOverflow(by: Int64(1) << doublings)
        return overflow ? capMilliseconds : min(capMilliseconds, wait)
    }

    /// The wait with jitter: `jitter` in [0, 1) picks a point in [nominal/2, nominal).
    func delay(attempt: Int, jitter: Double) -> Int64 {
        let nominal = nominal(attempt: attempt)
        let half = nominal / 2
        let fraction = min(max(jitter, 0), 0.999_999)
        return half + Int64(Double(nominal - half) * fraction)
    }

    /// `delay` with a random jitter.
    func randomDelay(attempt: Int) -> Int64 {
        delay(attempt: attempt, jitter: Double.random(in: 0..<1))
    }
}

/// Sleeps the calling thread for `milliseconds` (none for 0 or less), resuming after signals:
/// the API clients' waits between attempts, and the sweeper's pauses.
func sleepMilliseconds(_ milliseconds: Int64) {
    guard milliseconds > 0 else { return }
    var request = timespec(tv_sec: Int(milliseconds / 1000), tv_nsec: Int(milliseconds % 1000) * 1_000_000)
    var remaining = timespec()
    while nanosleep(&request, &remaining) != 0 && errno == EINTR { request = remaining }
}
