/// `GET /api/v1/billing/access`: the signed-in user's access snapshot.
public enum AccessRoute {
    public static func handle(_ request: HTTPRequest, _ context: RequestContext) throws -> HTTPResponse {
        let userId = try context.authenticatedUser(request)
        let db = try context.requireDatabase()
        let now = context.clock.now()
        let catalog = context.services.configuration.products
        let cadence: (String) -> Cadence? = { catalog[$0]?.cadence ?? Cadence.inferred(fromProductId: $0) }
        if let snapshot = try cached(userId: userId, now: now, cadence: cadence, context: context, on: db) {
            UserActivity.noteSeen(userId, now: now, on: db)
            return snapshotResponse(snapshot)
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
        UserActivity.noteSeen(userId, now: now, on: db)
        return snapshotResponse(snapshot)
    }

    /// The snapshot from the process's cache when the user's `snapshot_version` is still
    /// the cached one (one primary-key read) and the cached usage covers the current quota
    /// windows; nil otherwise (the caller reads everything).
    static func cached(userId: String, now: Timestamp, cadence: (String) -> Cadence?, context: RequestContext,
                       on db: DatabaseConnection) throws -> AccessSnapshot? {
        let metrics = BillingMetrics.shared
        // A clock reading before the load could need overlays that had expired by then.
        guard let entry = context.services.snapshots.entry(for: userId), now >= entry.record.loadedAt,
              let row = try db.queryOne("SELECT snapshot_version FROM billing_access WHERE user_id = \(userId)"),
              try row.uint64("snapshot_version") == entry.record.version else {
            metrics.snapshotCacheMisses.add()
            return nil
        }
        var snapshot = AccessSnapshot(record: entry.record, now: now, cadence: cadence)
        let plan = try QuotaService.plan(for: snapshot, services: context.services, on: db)
        guard let used = entry.used(in: plan.windows) else {
            metrics.snapshotCacheMisses.add()
            return nil
        }
        snapshot.quota = plan.status(used: used, enforcement: context.services.flags.current(on: db).enforcement)
        metrics.snapshotCacheHits.add()
        return snapshot
    }

    /// Record, plan and usage read in one READ ONLY transaction with a consistent snapshot:
    /// the balances never straddle a commit the access rows don't show. The record and its
    /// usage go to the cache (unless the user still has unmatched events to claim).
    static func loadWithQuota(userId: String, now: Timestamp, cadence: (String) -> Cadence?, context: RequestContext,
                              on db: DatabaseConnection) throws -> AccessSnapshot? {
        let loaded = try db.readOnlySnapshot { db -> (AccessSnapshot, SnapshotCache.Entry)? in
            guard let record = try AccessRecord.load(userId: userId, now: now, on: db) else { return nil }
            var snapshot = AccessSnapshot(record: record, now: now, cadence: cadence)
            let plan = try QuotaService.plan(for: snapshot, services: context.services, on: db)
            let used = try QuotaService.usage(userId: userId, windows: plan.windows, on: db)
            snapshot.quota = plan.status(used: used, enforcement: context.services.flags.current(on: db).enforcement)
            return (snapshot, SnapshotCache.Entry(record: record, windows: plan.windows, used: used))
        }
        guard let (snapshot, entry) = loaded else { return nil }
        if !entry.record.unclaimed { context.services.snapshots.store(entry) }
        return snapshot
    }

    private static func snapshotResponse(_ snapshot: AccessSnapshot) -> HTTPResponse {
        var response = HTTPResponse.json(.ok, snapshot.json)
        response.headers["Cache-Control"] = "no-store"
        return response
    }
}

extension RequestContext {
    /// The user id (`sub`) of the request's verified ID token; 401 for anything else, 501
    /// when no token keys are configured.
    public func authenticatedUser(_ request: HTTPRequest) throws -> String {
        guard let verifier = services.tokenVerifier else {
            throw APIError.notConfigured("ID token verification is not configured (auth.keysFile)")
        }
        guard let token = request.bearerToken else { throw AuthError(.missing) }
        return try verifier.verify(token, now: clock.now()).subject
    }

    /// This thread's database connection; 503 in a worker started without one.
    public func requireDatabase() throws -> DatabaseConnection {
        guard let database else { throw APIError.unavailable("no database configured") }
        return database
    }
}

extension Cadence {
    /// A cadence guessed from a product id's wording, for products missing from the catalog.
    static func inferred(fromProductId id: String) -> Cadence? {
        let lower = Array(id.utf8.lazy.map { $0 >= 0x41 && $0 <= 0x5A ? $0 | 0x20 : $0 })
        func contains(_ word: StaticString) -> Bool {
            let w = UnsafeBufferPointer(start: word.utf8Start, count: word.utf8CodeUnitCount)
            guard lower.count >= w.count else { return false }
            return (0...(lower.count - w.count)).contains { i in w.indices.allSatisfy { lower[i + $0] == w[$0] } }
        }
        if contains("week") { return .weekly }
        if contains("month") { return .monthly }
        if contains("year") || contains("annual") { return .yearly }
        if contains("lifetime") { return .lifetime }
        return nil
    }
}
