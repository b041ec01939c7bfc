import Synchronization

/// Runtime switches stored in `billing_flags`, shared by every worker and the admin daemon.
struct BillingFlags: Sendable, Equatable {
    enum Enforcement: String, Sendable, CaseIterable {
        /// Record usage, answer 200 with `overLimit` (the default).
        case observe
        /// Answer 402 past a limit.
        case enforce
    }

    /// The flags by their stored name, with the values each takes.
    enum Name: String, Sendable, CaseIterable {
        case enforcement
        /// Off: the app's purchases are refused (`POST /billing/apple/transactions` 403
        /// `purchases_disabled`, offerings say `purchasesEnabled: false`); the stores'
        /// notifications and webhooks are never cut (SPEC §14).
        case purchasesEnabled = "purchases.enabled"

        var values: [String] {
            switch self {
            case .enforcement: return Enforcement.allCases.map(\.rawValue)
            case .purchasesEnabled: return ["true", "false"]
            }
        }

        /// The value as stored (a JSON boolean for purchases.enabled, a string otherwise).
        func stored(_ value: JSON) -> String? {
            switch self {
            case .enforcement: return value.stringValue.flatMap { values.contains($0) ? $0 : nil }
            case .purchasesEnabled:
                if case .bool(let flag) = value { return flag ? "true" : "false" }
                return nil
            }
        }

        /// The stored value as JSON.
        func json(_ stored: String) -> JSON {
            switch self {
            case .enforcement: return .string(stored)
            case .purchasesEnabled: return .bool(stored == "true")
            }
        }
    }

    var enforcement: Enforcement
    var purchasesEnabled: Bool

    init(enforcement: Enforcement = .observe, purchasesEnabled: Bool = true) {
        self.enforcement = enforcement
        self.purchasesEnabled = purchasesEnabled
    }

    static let defaults = BillingFlags()

    func stored(_ name: Name) -> String {
        switch name {
        case .enforcement: return enforcement.rawValue
        case .purchasesEnabled: return purchasesEnabled ? "true" : "false"
        }
    }

    var json: JSON {
        var object = JSONObject()
        for name in Name.allCases { object[name.rawValue] = name.json(stored(name)) }
        return .object(object)
    }

    /// The stored flags (defaults for rows not written yet).
    static func load(on db: DatabaseConnection) throws(DatabaseError) -> BillingFlags {
        var flags = BillingFlags.defaults
        for row in try db.query("SELECT name, value FROM billing_flags") {
            let value = try row.string("value")
            switch Name(rawValue: try row.string("name")) {
            case .enforcement?: if let parsed = Enforcement(rawValue: value) { flags.enforcement = parsed }
            case .purchasesEnabled?: flags.purchasesEnabled = value != "false"
            case nil: break
            }
        }
        return flags
    }

    /// Sets one flag and audits the change (`flags.set` with from and to), in one
    /// transaction. Returns the previous stored value.
    static func set(
        _ name: Name, to value: String, actor: String, now: Timestamp,
        on db: DatabaseConnection
    ) throws -> String {
        try set([(name, value)], actor: actor, now: now, on: db)[0]
    }

    /// Sets several flags at once (SPEC §19): every change and its audit row in one
    /// transaction, so a reader sees all of them or none. Returns each previous stored value,
    /// in the order given.
    static func set(
        _ updates: [(Name, String)], actor: String, now: Timestamp,
        on db: DatabaseConnection
    ) throws -> [String] {
        try db.transaction(retries: 3, isolation: .readCommitted) { db -> [String] in
            var previous: [Name: String] = [:]
            // One lock order for every caller: by name.
            for (name, value) in updates.sorted(by: { $0.0.rawValue < $1.0.rawValue }) {
                let before =
                    try db.queryOne("SELECT value FROM billing_flags WHERE name = \(name.rawValue) FOR UPDATE")?
                    .string("value") ?? BillingFlags.defaults.stored(name)
                try db.execute(
                    """
                    INSERT INTO billing_flags (name, value, updated_by, updated_at) VALUES (\(name.rawValue), \(value), \(actor), \(now))
                    ON DUPLICATE KEY UPDATE value = VALUES(value), updated_by = VALUES(updated_by), updated_at = VALUES(updated_at)
                    """)
                try AuditLog.write(
                    actor: actor, action: "flags.set",
                    detail: ["flag": .string(name.rawValue), "from": .string(before), "to": .string(value)],
                    now: now, on: db)
                previous[name] = before
            }
            return updates.map { previous[$0.0]! }
        }
    }

    static func setEnforcement(
        _ value: Enforcement, actor: String, now: Timestamp,
        on db: DatabaseConnection
    ) throws -> Enforcement {
        Enforcement(rawValue: try set(.enforcement, to: value.rawValue, actor: actor, now: now, on: db)) ?? .observe
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
