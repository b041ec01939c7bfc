extension RPCMethodRegistry where Context: RPCContextProtocol {
    /// `grants.create`, `grants.revoke`, `grants.list`.
    mutating func registerGrantMethods(idPattern: UserIdPattern) {
        register(
            "grants.create",
            summary:
                "Grant plus/pro to a user (an overlay: never demotes a payer); the same idempotencyKey returns the same grant, with other params it is error 1002",
            params:
                "{userId, tier: plus|pro, startsAt?: ISO-8601 (default now), expiresAt?: ISO-8601 (absent = permanent), reason, campaign?, idempotencyKey, actor}"
        ) { request, context in
            let p = request.params
            try p.expectOnly("userId", "tier", "startsAt", "expiresAt", "reason", "campaign", "idempotencyKey", "actor")
            let grantRequest = GrantRequest(
                userId: try p.requireLiveUserId(pattern: idPattern, on: try context.requireDatabase()), tier: try p.requireTier(),
                startsAt: try p.optionalTimestamp("startsAt"), expiresAt: try p.optionalTimestamp("expiresAt"),
                reason: try p.requireNonEmptyString("reason", maxLength: 255),
                campaign: try p.optionalString("campaign", maxLength: 64),
                idempotencyKey: try p.requireNonEmptyString("idempotencyKey", maxLength: 128))
            let actor = try p.requireActor()
            if let startsAt = grantRequest.startsAt, let expiresAt = grantRequest.expiresAt, expiresAt <= startsAt {
                throw RPCError.invalidParams("\"expiresAt\" must be after \"startsAt\"", field: "expiresAt")
            }
            let now = context.clock.now()
            let outcome = try GrantStore.create(grantRequest, actor: actor, now: now, on: try context.requireDatabase())
            var result = outcome.grant.json(at: now).objectValue ?? [:]
            result["created"] = .bool(outcome.created)
            return .object(result)
        }
        register(
            "grants.revoke", summary: "Revoke a grant (idempotent: revoking a revoked grant changes nothing)",
            params: "{grantId: integer, actor, reason}"
        ) { request, context in
            try request.params.expectOnly("grantId", "actor", "reason")
            let grantId = try request.params.requireInt("grantId", in: 1...Int.max)
            let actor = try request.params.requireActor()
            let reason = try request.params.requireNonEmptyString("reason", maxLength: 255)
            let now = context.clock.now()
            let outcome = try GrantStore.revoke(
                grantId: UInt64(grantId), actor: actor, reason: reason, now: now,
                on: try context.requireDatabase())
            var result = outcome.grant.json(at: now).objectValue ?? [:]
            result["changed"] = .bool(outcome.changed)
            return .object(result)
        }
        register(
            "grants.list", summary: "A user's grants, newest first, with computed status Active/Scheduled/Expired/Revoked",
            params: "{userId}"
        ) { request, context in
            try request.params.expectOnly("userId")
            let userId = try request.params.requireLiveUserId(pattern: idPattern, on: try context.requireDatabase())
            let now = context.clock.now()
            let grants = try GrantStore.list(userId: userId, on: try context.requireDatabase())
            return ["userId": .string(userId), "grants": .array(grants.map { $0.json(at: now) })]
        }
    }
}
