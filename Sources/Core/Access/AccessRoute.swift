/// `GET /api/v1/billing/access`: the signed-in user's access snapshot.
public enum AccessRoute {
    public static func handle(_ request: HTTPRequest, _ context: RequestContext) throws -> HTTPResponse {
        let userId = try context.authenticatedUser(request)
        let db = try context.requireDatabase()
        let now = context.clock.now()
        let catalog = context.services.configuration.products
        let cadence: (String) -> Cadence? = { catalog[$0]?.cadence ?? Cadence.inferred(fromProductId: $0) }
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

    /// Projection, overlays and usage read in one READ ONLY transaction with a consistent
    /// snapshot: the balances never straddle a commit the access rows don't show.
    static func loadWithQuota(userId: String, now: Timestamp, cadence: (String) -> Cadence?, context: RequestContext,
                              on db: DatabaseConnection) throws -> AccessSnapshot? {
        try db.readOnlySnapshot { db -> AccessSnapshot? in
            guard var snapshot = try AccessSnapshot.loadInTransaction(userId: userId, now: now, cadence: cadence, on: db) else {
                return nil
            }
            snapshot.quota = try QuotaService.status(for: snapshot, services: context.services, on: db)
            return snapshot
        }
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
        let lower = id.lowercased()
        if lower.contains("week") { return .weekly }
        if lower.contains("month") { return .monthly }
        if lower.contains("year") || lower.contains("annual") { return .yearly }
        if lower.contains("lifetime") { return .lifetime }
        return nil
    }
}
