/// The snapshot with its quota: the one reader every route and RPC that answers a snapshot
/// goes through (`GET /billing/access`, `POST /billing/apple/transactions`, `access.get`), so
/// that all of them answer the same fields. Access names the quota; the quota never names
/// the snapshot (it reads a `QuotaSubject`).
extension AccessSnapshot {
    /// The user as the plan sees him (`planSources`), his windows anchored at his sign-up.
    var quotaSubject: QuotaSubject {
        QuotaSubject(userId: userId, sources: planSources, anchor: userCreatedAt ?? serverTime, now: serverTime)
    }

    /// Every source of access in force at `serverTime` as the plan sees it: each store
    /// subscription granting access (a trial as a trial) and each grant and campaign.
    var planSources: [QuotaResolution.Source] {
        var result = storeInForce.map { s in
            QuotaResolution.Source(
                tier: s.tier ?? .free, isTrial: s.isTrialInForce(at: serverTime),
                trialStartsAt: s.trialStartsAt, trialEndsAt: s.trialEndsAt)
        }
        result += sources.filter { $0.kind != "store" }.map { QuotaResolution.Source(tier: $0.tier) }
        return result
    }

    /// The user's snapshot with plan version, capabilities, balances and enforcement, and
    /// what the snapshot cache keeps of it; nil for an unknown user. Runs inside the
    /// caller's transaction, which should be a read-only snapshot (`readOnlySnapshot`), so
    /// the balances never straddle a commit the access rows don't show.
    /// - Parameter planCache: reuses the user's last plan resolution while it holds
    ///   (`SnapshotCache.plan`); nil resolves afresh (the same plan, computed).
    static func loadWithQuota(
        userId: String, now: Timestamp, cadence: (String) -> Cadence?,
        plans: [PublishedPlan], enforcement: Enforcement, planCache: SnapshotCache?,
        on db: DatabaseConnection
    ) throws(DatabaseError) -> (snapshot: AccessSnapshot, entry: SnapshotCache.Entry)? {
        guard let record = try AccessRecord.load(userId: userId, now: now, on: db) else { return nil }
        var snapshot = AccessSnapshot(record: record, now: now, cadence: cadence)
        let plan = planCache?.plan(for: snapshot, plans: plans) ?? QuotaService.plan(for: snapshot.quotaSubject, plans: plans)
        let used = try QuotaService.usage(userId: userId, windows: plan.windows, on: db)
        snapshot.quota = plan.status(used: used, enforcement: enforcement)
        return (snapshot, SnapshotCache.Entry(record: record, windows: plan.windows, used: used))
    }

    /// Consumes `amount` of `meter` for `userId` (`QuotaService.consume`), his quota subject
    /// read under his lock from his snapshot (cadence plays no part in quotas).
    static func consume(
        userId: String, meter: String, amount: Int64, idempotencyKey: String, now: Timestamp,
        plans: [PublishedPlan], enforcement: Enforcement, on db: DatabaseConnection
    ) throws -> QuotaService.Consumption {
        try QuotaService.consume(
            userId: userId, meter: meter, amount: amount, idempotencyKey: idempotencyKey, now: now,
            plans: plans, enforcement: enforcement, on: db
        ) { db in
            try UserLock.lock(userId, now: now, on: db)
            guard let snapshot = try AccessSnapshot.load(userId: userId, now: now, cadence: { _ in nil }, on: db) else {
                throw BillingError(.unavailable, "the user's access row is missing")
            }
            return snapshot.quotaSubject
        }
    }
}
