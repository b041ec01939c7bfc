/// `GET /api/v1/billing/access`: the signed-in user's access snapshot. Whoever else answers
/// a snapshot (`POST /billing/apple/transactions`) holds one of these and reads through it.
struct AccessRoute: Sendable {
    let catalog: ProductCatalog
    let snapshots: SnapshotCache
    let plans: PlanCatalog
    let flags: FlagCache
    let metrics: BillingMetrics
    let activity: UserActivity
    /// `?signed=true` (SPEC §17); nil without `entitlements.signingKeyFiles` (then 501).
    let tokens: EntitlementTokenSigner?

    func handle(_ request: HTTPRequest, _ context: some UserRequestContext) throws -> HTTPResponse {
        let signed = try signedQuery(request)
        let snapshot = try snapshot(request, context)
        guard signed, let tokens else { return Self.snapshotResponse(snapshot, cache: snapshots) }
        // The signed answer is the snapshot's document with its token: never the cached text
        // (that is reused only for what answers alike, and a token is new every time).
        var document = snapshot.json.objectValue ?? [:]
        document["signedSnapshot"] = .string(try tokens.sign(snapshot))
        metrics.entitlementTokens.add()
        return HTTPResponse(
            status: .ok, headers: ["Content-Type": "application/json", "Cache-Control": "no-store"],
            body: JSON.object(document).serialized())
    }

    /// `signed`: absent or `false`, or `true` (501 when no key signs).
    private func signedQuery(_ request: HTTPRequest) throws -> Bool {
        switch request.queryValue("signed") {
        case nil, "false": return false
        case "true":
            guard tokens != nil else {
                throw APIError.notConfigured("entitlement tokens are not configured (entitlements.signingKeyFiles)")
            }
            return true
        default: throw APIError.badRequest("\"signed\" must be true or false")
        }
    }

    /// The signed-in user's snapshot now: from the cache when still valid, else read (and
    /// the user made known on his first request).
    private func snapshot(_ request: HTTPRequest, _ context: some UserRequestContext) throws -> AccessSnapshot {
        let userId = try context.authenticatedUser(request)
        let db = try context.requireDatabase()
        let now = context.clock.now()
        let cadence = catalog.cadence(of:)
        if let snapshot = try cached(userId: userId, now: now, cadence: cadence, on: db) {
            activity.noteSeen(userId, now: now, on: db)
            return snapshot
        }
        var snapshot = try loadWithQuota(userId: userId, now: now, cadence: cadence, on: db)
        if snapshot == nil || snapshot?.unclaimed == true {
            // First valid request of this user: he becomes known, and whatever the stores
            // sent for him before folds in now. Also when an earlier first request created
            // him but died before the claim (kill -9 between the two transactions).
            try UserDirectory.ensureKnown(userId, source: .token, createdAt: now, now: now, on: db)
            snapshot = try loadWithQuota(userId: userId, now: now, cadence: cadence, on: db)
        }
        guard let snapshot else { throw APIError.unavailable() }
        activity.noteSeen(userId, now: now, on: db)
        return snapshot
    }

    /// The snapshot from the process's cache when the user's `snapshot_version` is still
    /// the cached one (one primary-key read) and the cached usage covers the current quota
    /// windows; nil otherwise (the caller reads everything).
    func cached(userId: String, now: Timestamp, cadence: (String) -> Cadence?, on db: DatabaseConnection) throws -> AccessSnapshot? {
        // A clock reading before the load could need overlays that had expired by then.
        guard let entry = snapshots.entry(for: userId), now >= entry.record.loadedAt,
            let row = try db.queryOne("SELECT snapshot_version FROM billing_access WHERE user_id = \(userId)"),
            try row.uint64("snapshot_version") == entry.record.version
        else {
            metrics.snapshotCacheMisses.add()
            return nil
        }
        var snapshot = AccessSnapshot(record: entry.record, now: now, cadence: cadence)
        let plan = snapshots.plan(for: snapshot, plans: try plans.plans(on: db))
        guard let used = entry.used(in: plan.windows) else {
            metrics.snapshotCacheMisses.add()
            return nil
        }
        snapshot.quota = plan.status(used: used, enforcement: flags.current(on: db).enforcement)
        metrics.snapshotCacheHits.add()
        return snapshot
    }

    /// `AccessSnapshot.loadWithQuota` in its own READ ONLY transaction with a consistent
    /// snapshot. The record and its usage go to the cache (unless the user still has
    /// unmatched events to claim).
    func loadWithQuota(userId: String, now: Timestamp, cadence: (String) -> Cadence?, on db: DatabaseConnection) throws -> AccessSnapshot? {
        let loaded = try db.readOnlySnapshot { db in
            try AccessSnapshot.loadWithQuota(
                userId: userId, now: now, cadence: cadence, plans: try plans.plans(on: db),
                enforcement: flags.current(on: db).enforcement, planCache: snapshots, on: db)
        }
        guard let (snapshot, entry) = loaded else { return nil }
        if !entry.record.unclaimed { snapshots.store(entry) }
        return snapshot
    }

    /// The snapshot as the route answers it; its text comes from `cache` (`RenderedSnapshot`).
    static func snapshotResponse(_ snapshot: AccessSnapshot, cache: SnapshotCache) -> HTTPResponse {
        HTTPResponse(
            status: .ok, headers: ["Content-Type": "application/json", "Cache-Control": "no-store"],
            body: cache.body(for: snapshot))
    }
}
