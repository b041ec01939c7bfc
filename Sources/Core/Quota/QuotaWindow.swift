/// Where a meter's current window lies for a user (pure; SPEC §7).
///
/// Windows of N days are anchored at the user's sign-up (`billing_users.created_at`) and
/// follow each other without gaps: window k is [anchor + k·N days, anchor + (k+1)·N days).
/// They never restart on a plan change, an upgrade, a restore or a new version of the plan,
/// so changing plan cannot grant a fresh allowance: a Plus user with 2 used who upgrades to
/// Pro has 5 − 2 = 3 left in the same window. The trial window is the trial period itself.
struct QuotaWindow: Sendable, Equatable {
    var start: Timestamp
    var end: Timestamp

    init(start: Timestamp, end: Timestamp) {
        self.start = start
        self.end = end
    }

    static func current(
        _ window: PlanContract.Window, anchor: Timestamp, now: Timestamp,
        trial: (start: Timestamp, end: Timestamp)?
    ) -> QuotaWindow {
        switch window {
        case .trial:
            if let trial { return QuotaWindow(start: trial.start, end: trial.end) }
            // A trial tier without a known trial window: fall back to a week from the anchor.
            return current(.days(7), anchor: anchor, now: now, trial: nil)
        case .days(let days):
            let length = Int64(days) * 86_400_000
            // Before the anchor (a request whose clock reading precedes the sign-up another
            // request just recorded) is still the first window: nothing predates sign-up.
            let elapsed = max(0, now.millisecondsSinceEpoch - anchor.millisecondsSinceEpoch)
            let index = elapsed / length
            let start = anchor.adding(milliseconds: index * length)
            return QuotaWindow(start: start, end: start.adding(milliseconds: length))
        }
    }
}

/// One meter's balance as the snapshot shows it.
struct MeterBalance: Sendable, Equatable {
    var meter: String
    /// nil = unlimited.
    var limit: Int64?
    var used: Int64
    var window: QuotaWindow

    init(meter: String, limit: Int64?, used: Int64, window: QuotaWindow) {
        self.meter = meter
        self.limit = limit
        self.used = used
        self.window = window
    }

    var remaining: Int64? { limit.map { max(0, $0 - used) } }

    /// Whether consuming `amount` more stays within the limit.
    func allows(_ amount: Int64) -> Bool {
        guard let limit else { return true }
        return used + amount <= limit
    }

    var json: JSON {
        [
            "limit": limit.map(JSON.int) ?? .null, "used": .int(used), "remaining": remaining.map(JSON.int) ?? .null,
            "windowStart": .string(window.start.iso8601), "resetsAt": .string(window.end.iso8601),
        ]
    }
}
