import Synchronization

/// Runtime switches stored in `billing_flags`, shared by every worker and the admin daemon.
struct BillingFlags: Sendable, Equatable {
    enum Enforcement: String, Sendable, CaseIterable {
        /// Record usage, answer 200 with `overLimit` (the default).
        case observe
        /// Answer 402 past a limit.
        case enforce
    }

    var enforcement: Enforcement

    init(enforcement: Enforcement = .observe) { self.enforcement = enforcement }

    static let defaults = BillingFlags()

    var json: JSON { ["enforcement": .string(enforcement.rawValue)] }

    /// The stored flags (defaults for rows not written yet).
    static func load(on db: DatabaseConnection) throws(DatabaseError) -> BillingFlags {
        var flags = BillingFlags.defaults
        for row in try db.query("SELECT name, value FROM billing_flags") {
            if try row.string("name") == "enforcement", let value = Enforcement(rawValue: try row.string("value")) {
                flags.enforcement = value
            }
        }
        return flags
    }

    /// Sets the enforcement flag and audits the change, in one transaction. Returns the
    /// previous value.
    static func setEnforcement(_ value: Enforcement, actor: String, now: Timestamp,
                                      on db: DatabaseConnection) throws -> Enforcement {
        try db.transaction(retries: 3, isolation: .readCommitted) { db -> Enforcement in
            let previous = try db.queryOne("SELECT value FROM billing_flags WHERE name = 'enforcement' FOR UPDATE")
                .flatMap { (row) throws(DatabaseError) -> Enforcement? in Enforcement(rawValue: try row.string("value")) } ?? .observe
            try db.execute("""
                INSERT INTO billing_flags (name, value, updated_by, updated_at) VALUES ('enforcement', \(value.rawValue), \(actor), \(now))
                ON DUPLICATE KEY UPDATE value = VALUES(value), updated_by = VALUES(updated_by), updated_at = VALUES(updated_at)
                """)
            try AuditLog.write(actor: actor, action: "flags.set",
                               detail: ["flag": "enforcement", "from": .string(previous.rawValue), "to": .string(value.rawValue)],
                               now: now, on: db)
            return previous
        }
    }
}

/// The flags as a worker sees them: re-read from the database when the cached copy is
/// older than `maxAge` (one second), so a `flags.set` reaches every worker within a second
/// without a query per request. Process-wide and lock-protected; a failed read keeps the
/// last known flags (defaults before the first read).
final class FlagCache: Sendable {
    private struct State {
        var flags = BillingFlags.defaults
        var fetchedAtMonotonicMs: Int64?
    }

    private let state = Mutex(State())
    let maxAgeMilliseconds: Int64

    init(maxAgeMilliseconds: Int64 = 1000) { self.maxAgeMilliseconds = maxAgeMilliseconds }

    /// Forgets the cached copy: the next `current` reads the database (after a local change).
    func invalidate() {
        state.withLock { $0.fetchedAtMonotonicMs = nil }
    }

    func current(on db: DatabaseConnection?) -> BillingFlags {
        let now = monotonicMilliseconds()
        let cached = state.withLock { state -> BillingFlags? in
            guard let at = state.fetchedAtMonotonicMs, now - at < maxAgeMilliseconds else { return nil }
            return state.flags
        }
        if let cached { return cached }
        guard let db, let fresh = try? BillingFlags.load(on: db) else {
            return state.withLock { $0.flags }
        }
        state.withLock { state in
            state.flags = fresh
            state.fetchedAtMonotonicMs = now
        }
        return fresh
    }
}

/// Enforcement of quotas (`flags.set {enforcement}`): observe records and reports
/// `overLimit`; enforce refuses with 402 and records nothing.
typealias Enforcement = BillingFlags.Enforcement
