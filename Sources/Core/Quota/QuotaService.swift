/// What the plan allows a user right now, and consuming it (SPEC §7).
struct QuotaStatus: Sendable, Equatable {
    var planVersion: Int
    var planTier: PlanContract.PlanTier
    var capabilities: [String]
    var balances: [MeterBalance]
    var enforcement: Enforcement
}

/// Whose quota it is, as the plan sees him: every source of access in force at `now` (a
/// store trial as a trial) and the instant his windows are anchored at (his sign-up). The
/// access snapshot says it (`AccessSnapshot.quotaSubject`); the quota needs nothing else of him.
struct QuotaSubject: Sendable, Equatable {
    var userId: String
    var sources: [QuotaResolution.Source]
    var anchor: Timestamp
    var now: Timestamp
}

enum QuotaService {
    /// What the plan in force gives the subject: version, capabilities and each meter's
    /// limit and current window, from every source in force (`QuotaResolution`), without the
    /// usage (pure).
    static func plan(for subject: QuotaSubject, plans: [PublishedPlan]) -> QuotaPlan {
        QuotaResolution.plan(sources: subject.sources, plans: plans, anchor: subject.anchor, now: subject.now)
    }

    /// `plan(for:plans:)`, or `last` again while it still holds (`QuotaResolution.Resolved`).
    static func plan(
        for subject: QuotaSubject, plans: [PublishedPlan],
        reusing last: QuotaResolution.Resolved?
    ) -> (resolved: QuotaResolution.Resolved, reused: Bool) {
        QuotaResolution.plan(sources: subject.sources, plans: plans, anchor: subject.anchor, now: subject.now, reusing: last)
    }

    /// Units used per meter, each within its own window, in one query.
    static func usage(userId: String, windows: [(meter: String, window: QuotaWindow)], on db: DatabaseConnection) throws(DatabaseError) -> [String:
        Int64]
    {
        guard !windows.isEmpty else { return [:] }
        var condition: SQLQuery = ""
        for (index, entry) in windows.enumerated() {
            if index > 0 { condition.append(" OR ") }
            condition.append("(meter = \(entry.meter) AND created_at >= \(entry.window.start) AND created_at < \(entry.window.end))")
        }
        let rows = try db.query(
            """
            SELECT meter, CAST(SUM(amount) AS SIGNED) AS used FROM usage_ledger
            WHERE user_id = \(userId) AND (\(condition)) GROUP BY meter
            """)
        var result: [String: Int64] = [:]
        for row in rows { result[try row.string("meter")] = try row.int64("used") }
        return result
    }

    /// The outcome of `POST /billing/usage`.
    enum Consumption: Sendable, Equatable {
        /// Recorded (or recorded earlier under the same key): the answer to send.
        case recorded(JSON)
        /// Refused in enforce mode; nothing was recorded.
        case refused(meter: String, placement: String?, balance: MeterBalance)
    }

    /// Records `amount` of `meter` for `userId` once per `idempotencyKey`. The user's lock
    /// serializes his consumptions, so in enforce mode concurrent consumers of the last unit
    /// cannot both succeed.
    /// - Parameters:
    ///   - plans: the published plan versions (`PlanCatalog`).
    ///   - enforcement: the `billing_flags` mode in force.
    ///   - lockedSubject: takes the user's lock (the kernel's `UserLock`, held to commit) and
    ///     reads his quota subject under it, inside the transaction.
    static func consume(
        userId: String, meter: String, amount: Int64, idempotencyKey: String, now: Timestamp,
        plans: [PublishedPlan], enforcement: Enforcement, on db: DatabaseConnection,
        lockedSubject: (DatabaseConnection) throws -> QuotaSubject
    ) throws -> Consumption {
        try db.transaction(retries: 3, isolation: .readCommitted) { db -> Consumption in
            if let replay = try previous(userId: userId, meter: meter, key: idempotencyKey, amount: amount, on: db) {
                return .recorded(replay)
            }
            let subject = try lockedSubject(db)
            // A request with the same key may have committed while we waited for the lock.
            if let replay = try previous(userId: userId, meter: meter, key: idempotencyKey, amount: amount, on: db) {
                return .recorded(replay)
            }
            let plan = plan(for: subject, plans: plans)
            let definition = plan.meters.first { $0.name == meter }
            let window = definition?.window ?? QuotaWindow.current(.days(1), anchor: subject.anchor, now: now, trial: nil)
            let used = try usage(userId: userId, windows: [(meter, window)], on: db)[meter] ?? 0
            // A meter the contract knows but this tier lacks has a limit of 0.
            let balance = MeterBalance(meter: meter, limit: definition == nil ? 0 : definition!.limit, used: used, window: window)
            let over = !balance.allows(amount)
            if over && enforcement == .enforce {
                return .refused(meter: meter, placement: definition?.placement, balance: balance)
            }
            var after = balance
            after.used += amount
            let version = definition?.version ?? PlanCatalog.plan(in: plans, at: now).version
            let response: JSON = [
                "recorded": true, "meter": .string(meter), "amount": .int(amount), "idempotencyKey": .string(idempotencyKey),
                "overLimit": .bool(over), "enforcement": .string(enforcement.rawValue), "planVersion": .int(Int64(version)),
                "balance": after.json,
            ]
            try db.execute(
                """
                INSERT INTO usage_ledger (user_id, meter, amount, idempotency_key, created_at, plan_version, plan_tier,
                  window_start, window_end, limit_at_consumption, over_limit, response)
                VALUES (\(userId), \(meter), \(amount), \(idempotencyKey), \(max(now, window.start)), \(version),
                  \((definition?.planTier ?? plan.planTier).rawValue),
                  \(window.start), \(window.end), \(balance.limit), \(over), \(response))
                """)
            return .recorded(response)
        }
    }

    private static func previous(userId: String, meter: String, key: String, amount: Int64, on db: DatabaseConnection) throws -> JSON? {
        guard
            let row = try db.queryOne(
                """
                SELECT amount, response FROM usage_ledger WHERE user_id = \(userId) AND meter = \(meter) AND idempotency_key = \(key)
                """)
        else { return nil }
        guard try row.int64("amount") == amount else {
            throw BillingError(.idempotencyMismatch, "idempotencyKey was already used with a different amount")
        }
        return try row.json("response")
    }
}

/// The plan side of a user's quota status at one instant: everything but the usage.
struct QuotaPlan: Sendable, Equatable {
    var planVersion: Int
    var planTier: PlanContract.PlanTier
    var capabilities: [String]
    var meters: [Meter]

    struct Meter: Sendable, Equatable {
        var name: String
        /// nil = unlimited.
        var limit: Int64?
        var window: QuotaWindow
        /// The paywall placement the app shows when this meter refuses (402).
        var placement: String?
        /// The contract version in effect at the window's start.
        var version: Int
        /// The contract tier that gives this limit (the most generous source's).
        var planTier: PlanContract.PlanTier
    }

    /// Each meter's current window, for the usage query.
    var windows: [(meter: String, window: QuotaWindow)] { meters.map { ($0.name, $0.window) } }

    /// The status with `used` units per meter (a meter missing from it has used nothing).
    func status(used: [String: Int64], enforcement: Enforcement) -> QuotaStatus {
        QuotaStatus(
            planVersion: planVersion, planTier: planTier, capabilities: capabilities,
            balances: meters.map { MeterBalance(meter: $0.name, limit: $0.limit, used: used[$0.name] ?? 0, window: $0.window) },
            enforcement: enforcement)
    }
}
