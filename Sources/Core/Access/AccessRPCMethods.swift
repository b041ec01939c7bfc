/// The operator overlays of a user in detail (grants with their status, campaign
/// memberships): the grant and grandfathering features answer it, through the application.
typealias OverlayDetails =
    @Sendable (_ userId: String, _ now: Timestamp, _ db: DatabaseConnection) throws -> (
        grants: [JSON], campaigns: [JSON]
    )

extension RPCMethodRegistry where Context: RPCContextProtocol {
    /// `access.get`: what an operator panel shows for one user.
    mutating func registerAccessMethods(
        idPattern: UserIdPattern, catalog: ProductCatalog, plans: PlanCatalog, flags: FlagCache,
        overlayDetails: @escaping OverlayDetails
    ) {
        register(
            "access.get",
            summary: "A user's access snapshot (as GET /billing/access) plus every source in detail: store rows, grants with status, campaigns",
            params: "{userId}"
        ) { request, context in
            try request.params.expectOnly("userId")
            let userId = try request.params.requireUserId(pattern: idPattern)
            let db = try context.requireDatabase()
            let now = context.clock.now()
            let cadence = catalog.cadence(of:)
            return try db.readOnlySnapshot { db -> JSON in
                if try db.queryOne("SELECT 1 AS known FROM billing_users WHERE id = \(userId)") == nil,
                    let erasedAt = try ErasedUsers.erasedAt(userId, on: db)
                {
                    // Erased (SPEC §19): nothing of him is left to show but that.
                    return [
                        "user": ["userId": .string(userId), "deleted": true, "deletedAt": .string(erasedAt.iso8601)],
                        "snapshot": .null, "store": [], "grants": [], "campaigns": [],
                    ]
                }
                guard let user = try db.queryOne("SELECT created_at, source, deleted_at FROM billing_users WHERE id = \(userId)"),
                    let snapshot = try AccessSnapshot.loadWithQuota(
                        userId: userId, now: now, cadence: cadence, plans: try plans.plans(on: db),
                        enforcement: flags.current(on: db).enforcement, planCache: nil, on: db)?.snapshot
                else {
                    throw BillingError.notFound("user", ["userId": .string(userId)])
                }
                let subscriptions = try db.query(
                    "SELECT \(unsafeRaw: SubscriptionState.columns) FROM billing_subscriptions s WHERE s.user_id = \(userId) ORDER BY s.subscription_id"
                )
                .map { (row) throws(DatabaseError) -> SubscriptionState in try SubscriptionState(row: row) }
                let overlays = try overlayDetails(userId, now, db)
                return [
                    "snapshot": snapshot.json,
                    "user": [
                        "userId": .string(userId), "createdAt": .string(try user.timestamp("created_at").iso8601),
                        "source": .string(try user.string("source")),
                        "deleted": .bool(try user.optionalTimestamp("deleted_at") != nil),
                        "deletedAt": JSON(try user.optionalTimestamp("deleted_at")?.iso8601),
                    ],
                    "store": .array(subscriptions.map { $0.adminJSON(at: now) }),
                    "grants": .array(overlays.grants),
                    "campaigns": .array(overlays.campaigns),
                ]
            }
        }
    }
}

extension SubscriptionState {
    /// A stored subscription with its read-time verdict, for operators.
    func adminJSON(at now: Timestamp) -> JSON {
        [
            "subscriptionId": .string(subscriptionId), "provider": .string(provider.rawValue), "platform": JSON(platform),
            "environment": .string(environment.rawValue), "productId": JSON(productId), "tier": JSON(tier?.rawValue),
            "phase": .string(phase(at: now).rawValue), "storedPhase": .string(phase.rawValue), "willRenew": .bool(willRenew),
            "inTrialPeriod": .bool(inTrialPeriod), "purchasedAt": JSON(purchasedAt?.iso8601), "expiresAt": JSON(expiresAt?.iso8601),
            "graceExpiresAt": JSON(graceExpiresAt?.iso8601), "grantsAccess": .bool(grantsAccess(at: now)),
            "pendingChange": pendingChange.map {
                [
                    "productId": .string($0.productId), "tier": JSON($0.tier?.rawValue),
                    "effectiveAt": JSON($0.effectiveAt?.iso8601),
                ]
            } ?? .null,
            "lastEventAt": .string(lastEventAt.iso8601),
        ]
    }
}
