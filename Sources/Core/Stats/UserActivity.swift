import Synchronization

/// Who was seen, per UTC day, for "paying % of active users" (docs/stats.md).
///
/// `GET /billing/access` calls `noteSeen` for every authenticated request. Each worker
/// process remembers which users it already recorded today, so a user costs one
/// `INSERT IGNORE` (billing_user_days) and one conditional `UPDATE` of
/// `billing_users.last_seen_at` per day and per worker process; every other request is a
/// lookup in a set under a lock. Best effort: a failed write is retried on the next request.
/// One instance per process, owned by the composition root.
final class UserActivity: Sendable {
    /// Bound on the remembered ids per process; past it the set starts over (a few more
    /// harmless INSERT IGNOREs, never unbounded memory).
    static let maximumRemembered = 200_000

    private struct State {
        var day: Int64 = -1
        var users: Set<String> = []
    }

    private let state = Mutex(State())

    init() {}

    /// The UTC day number of an instant.
    static func dayNumber(_ t: Timestamp) -> Int64 {
        let ms = t.millisecondsSinceEpoch
        return ms >= 0 ? ms / 86_400_000 : (ms - 86_399_999) / 86_400_000
    }

    func noteSeen(_ userId: String, now: Timestamp, on db: DatabaseConnection) {
        let day = Self.dayNumber(now)
        let known = state.withLock { s -> Bool in
            if s.day != day {
                s.day = day
                s.users.removeAll(keepingCapacity: true)
            }
            return s.users.contains(userId)
        }
        guard !known else { return }
        do {
            try Self.record(userId, now: now, on: db)
        } catch {
            return
        }
        state.withLock { s in
            guard s.day == day else { return }
            if s.users.count >= Self.maximumRemembered { s.users.removeAll() }
            s.users.insert(userId)
        }
    }

    /// The writes themselves (idempotent): the day row and a coarse last_seen_at.
    static func record(_ userId: String, now: Timestamp, on db: DatabaseConnection) throws(DatabaseError) {
        let startOfDay = Timestamp(millisecondsSinceEpoch: dayNumber(now) * 86_400_000)
        try db.execute("INSERT IGNORE INTO billing_user_days (day, user_id) VALUES (DATE(\(now)), \(userId))")
        try db.execute(
            """
            UPDATE billing_users SET last_seen_at = \(now)
            WHERE id = \(userId) AND (last_seen_at IS NULL OR last_seen_at < \(startOfDay))
            """)
    }
}
