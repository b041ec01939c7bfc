extension RPCMethodRegistry where Context: RPCContextProtocol {
    /// `subscriptions.reconcile`, `subscriptions.reconcileStatus`.
    /// `reconcile`: nil when neither `apple.serverApi` nor `revenuecat.apiKey` is configured.
    mutating func registerReconcileMethods(idPattern: UserIdPattern, reconcile: ReconcileService?) {
        register(
            "subscriptions.reconcile",
            summary:
                "Pull from the stores now and fold what they say: a user's App Store subscriptions, his RevenueCat subscriber and his Google Play purchases (every provider configured), or one App Store subscription; audited; answers what changed per subscription and per provider",
            params: "{userId | originalTransactionId (string, or the digits as a number), actor}"
        ) { request, context in
            let p = request.params
            try p.expectOnly("userId", "originalTransactionId", "actor")
            let actor = try p.requireActor()
            let userId =
                try p.optionalValue("userId") == nil
                ? nil
                : try p.requireLiveUserId(pattern: idPattern, on: try context.requireDatabase())
            // Apple's ids are digits: a CLI that parses `--originalTransactionId 2000…` as JSON
            // sends a number, which names the same transaction.
            let originalTransactionId =
                try p.optionalValue("originalTransactionId")?.int64Value.map { String($0) }
                ?? p.optionalString("originalTransactionId", maxLength: 191)
            guard (userId == nil) != (originalTransactionId == nil) else {
                throw RPCError.invalidParams("give exactly one of \"userId\" and \"originalTransactionId\"")
            }
            guard let service = reconcile else {
                throw BillingError(
                    .conflict, "no store API is configured (apple.serverApi, revenuecat.apiKey)",
                    data: ["reason": "not_configured"])
            }
            if originalTransactionId != nil && service.reconciler == nil {
                throw BillingError(
                    .conflict, "the App Store Server API is not configured (apple.serverApi)",
                    data: ["reason": "not_configured"])
            }
            let db = try context.requireDatabase()
            let targets =
                service.reconciler == nil
                ? []
                : try ReconcileTargets.find(userId: userId, originalTransactionId: originalTransactionId, on: db)
            // RevenueCat is asked about the user whenever its API is configured: a subscriber
            // whose every webhook was lost has nothing here to say he has one.
            let pullsRevenueCat = userId != nil && service.revenuecat != nil
            let playTargets = service.google == nil ? [] : try userId.map { user in try ReconcileTargets.play(userId: user, on: db) } ?? []
            guard !targets.isEmpty || pullsRevenueCat || !playTargets.isEmpty else {
                throw BillingError.notFound(
                    "App Store subscription",
                    userId.map { ["userId": .string($0)] }
                        ?? ["originalTransactionId": .string(originalTransactionId ?? "")])
            }
            // Each target pulled, audited; whether any changed, and what each said.
            func pullAll(_ targets: [String], _ pull: (String) throws -> ReconcileService.PullResult) throws -> (Bool, [JSON]) {
                let results = try targets.map(pull)
                return (results.contains(where: \.changed), results.map(\.json))
            }
            let audit = (actor: actor, action: "subscriptions.reconcile")
            var (changed, results) = try pullAll(targets) { try service.pull(subscriptionId: $0, audit: audit, on: db) }
            var answer: JSONObject = ["subscriptions": .array(results)]
            var providers: JSONObject = [:]
            if service.reconciler != nil { providers["apple"] = ["changed": .bool(changed), "subscriptions": .array(results)] }
            if pullsRevenueCat, let userId {
                let result = try service.pullRevenueCat(userId: userId, audit: audit, on: db)
                changed = changed || result.changed
                answer["revenuecat"] = result.json
                providers["revenuecat"] = result.json
            }
            if service.google != nil, userId != nil {
                let (playChanged, plays) = try pullAll(playTargets) { try service.pullGoogle(subscriptionId: $0, audit: audit, on: db) }
                changed = changed || playChanged
                providers["google"] = ["changed": .bool(playChanged), "subscriptions": .array(plays)]
            }
            answer["changed"] = .bool(changed)
            answer["providers"] = .object(providers)
            return .object(answer)
        }
        register(
            "subscriptions.reconcileStatus",
            summary:
                "Reconciliation at a glance: this daemon's counters (pulls by outcome, corrections, API errors by status, sweep lag; also as Prometheus text) and the schedule (subscriptions pulled, backing off, due)",
            params: "{}"
        ) { request, context in
            try request.params.expectOnly()
            guard let service = reconcile else { return ["configured": false] }
            let db = try context.requireDatabase()
            let now = context.clock.now()
            func schedule(_ provider: ReconcileProvider?) throws -> JSON {
                let filter: SQLQuery = provider.map { "WHERE provider = \($0.rawValue)" } ?? ""
                let row = try db.queryOne(
                    """
                    SELECT COUNT(*) AS tracked, COALESCE(SUM(failures > 0), 0) AS backing_off,
                           COALESCE(SUM(next_attempt_at <= \(now)), 0) AS due, MAX(last_success_at) AS last_success_at
                    FROM billing_reconcile_state \(filter)
                    """)
                return [
                    "tracked": .int(try row?.int64("tracked") ?? 0), "backingOff": .int(try row?.int64("backing_off") ?? 0),
                    "due": .int(try row?.int64("due") ?? 0),
                    "lastSuccessAt": JSON(try row?.optionalTimestamp("last_success_at")?.iso8601),
                ]
            }
            return [
                "configured": true,
                "providers": [
                    "apple": .bool(service.reconciler != nil), "revenuecat": .bool(service.revenuecat != nil), "google": .bool(service.google != nil),
                ],
                "metrics": service.metrics.json, "prometheus": .string(service.metrics.prometheus),
                "schedule": try schedule(nil),
                "scheduleByProvider": [
                    "apple": try schedule(.apple), "revenuecat": try schedule(.revenuecat), "google": try schedule(.google),
                ],
            ]
        }
    }
}

/// The App Store subscriptions `subscriptions.reconcile` names: the one given when it is
/// bound to a user, or every one bound to the user (at most 100).
enum ReconcileTargets {
    static func find(userId: String?, originalTransactionId: String?, on db: DatabaseConnection) throws(DatabaseError) -> [String] {
        let rows: [SQLRow]
        if let userId {
            rows = try db.query(
                """
                SELECT b.original_transaction_id FROM billing_apple_bindings b
                WHERE b.user_id = \(userId) ORDER BY b.original_transaction_id LIMIT 100
                """)
        } else {
            rows = try db.query(
                """
                SELECT b.original_transaction_id FROM billing_apple_bindings b
                WHERE b.original_transaction_id = \(originalTransactionId)
                """)
        }
        return try rows.map { (row) throws(DatabaseError) -> String in try row.string("original_transaction_id") }
    }

    /// The Play purchases the user owns (at most 100), by subscription id.
    static func play(userId: String, on db: DatabaseConnection) throws(DatabaseError) -> [String] {
        try db.query(
            "SELECT subscription_id FROM billing_google_purchases WHERE user_id = \(userId) ORDER BY subscription_id LIMIT 100"
        ).map { (row) throws(DatabaseError) -> String in try row.string("subscription_id") }
    }
}
