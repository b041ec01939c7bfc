/// `GET /api/v1/billing/access`: the signed-in user's access snapshot.
enum AccessRoute {
    /// What the access route (and whoever answers with a snapshot) needs of its request context.
    protocol Context: AuthenticatedRequestContext, DatabaseRequestContext {
        var catalog: ProductCatalog { get }
        var snapshots: SnapshotCache { get }
        var plans: PlanCatalog { get }
        var flags: FlagCache { get }
        var metrics: BillingMetrics { get }
        var activity: UserActivity { get }
    }

    static func handle(_ request: HTTPRequest, _ context: some Context) throws -> HTTPResponse {
        let userId = try context.authenticatedUser(request)
        let db = try context.requireDatabase()
        let now = context.clock.now()
        let cadence = context.catalog.cadence(of:)
        if let snapshot = try cached(userId: userId, now: now, cadence: cadence, context: context, on: db) {
            context.activity.noteSeen(userId, now: now, on: db)
            return snapshotResponse(snapshot, cache: context.snapshots)
        }
        var snapshot = try loadWithQuota(userId: userId, now: now, cadence: cadence, context: context, on: db)
        if snapshot == nil || snapshot?.unclaimed == true {
            // First valid request of this user: he becomes known, and whatever the stores
            // sent for him before folds in now. Also when an earlier first request created
            // him but died before the claim (kill -9 between the two transactions).
            try UserDirectory.ensureKnown(userId, source: .token, createdAt: now, now: now, on: db)
            snapshot = try loadWithQuota(userId: userId, now: now, cadence: cadence, context: context, on: db)
        }
        guard let snapshot else { throw APIError.unavailable() }
        context.activity.noteSeen(userId, now: now, on: db)
        return snapshotResponse(snapshot, cache: context.snapshots)
    }

    /// The snapshot from the process's cache when the user's `snapshot_version` is still
    /// the cached one (one primary-key read) and the cached usage covers the current quota
    /// windows; nil otherwise (the caller reads everything).
    static func cached(
        userId: String, now: Timestamp, cadence: (String) -> Cadence?, context: some Context,
        on db: DatabaseConnection
    ) throws -> AccessSnapshot? {
        let metrics = context.metrics
        // A clock reading before the load could need overlays that had expired by then.
        guard let entry = context.snapshots.entry(for: userId), now >= entry.record.loadedAt,
            let row = try db.queryOne("SELECT snapshot_version FROM billing_access WHERE user_id = \(userId)"),
            try row.uint64("snapshot_version") == entry.record.version
        else {
            metrics.snapshotCacheMisses.add()
            return nil
        }
        var snapshot = AccessSnapshot(record: entry.record, now: now, cadence: cadence)
        let plan = context.snapshots.plan(for: snapshot, plans: try context.plans.plans(on: db))
        guard let used = entry.used(in: plan.windows) else {
            metrics.snapshotCacheMisses.add()
            return nil
        }
        snapshot.quota = plan.status(used: used, enforcement: context.flags.current(on: db).enforcement)
        metrics.snapshotCacheHits.add()
        return snapshot
    }

    /// `AccessSnapshot.loadWithQuota` in its own READ ONLY transaction with a consistent
    /// snapshot. The record and its usage go to the cache (unless the user still has
    /// unmatched events to claim).
    static func loadWithQuota(
        userId: String, now: Timestamp, cadence: (String) -> Cadence?, context: some Context,
        on db: DatabaseConnection
    ) throws -> AccessSnapshot? {
        let loaded = try db.readOnlySnapshot { db in
            try AccessSnapshot.loadWithQuota(
                userId: userId, now: now, cadence: cadence, plans: try context.plans.plans(on: db),
                enforcement: context.flags.current(on: db).enforcement, planCache: context.snapshots, on: db)
        }
        guard let (snapshot, entry) = loaded else { return nil }
        if !entry.record.unclaimed { context.snapshots.store(entry) }
        return snapshot
    }

    /// The snapshot as the route answers it; its text comes from `cache` (`RenderedSnapshot`).
    static func snapshotResponse(_ snapshot: AccessSnapshot, cache: SnapshotCache) -> HTTPResponse {
        HTTPResponse(
            status: .ok, headers: ["Content-Type": "application/json", "Cache-Control": "no-store"],
            body: cache.body(for: snapshot))
    }
}
