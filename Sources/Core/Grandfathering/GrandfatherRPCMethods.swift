extension RPCMethodRegistry where Context: RPCContextProtocol {
    /// `grandfather.applyCohort`, `grandfather.applyUsers`, `grandfather.audit`, `grandfather.revoke`.
    mutating func registerGrandfatherMethods(idPattern: UserIdPattern) {
        register(
            "grandfather.applyCohort",
            summary:
                "Give a campaign's tier to users created in [createdFrom, createdBefore): one bounded batch per call, resume with nextCursor until done; dryRun counts",
            params:
                "{campaign, tier: plus|pro, createdFrom?, createdBefore, expiresAt?, reason, actor, dryRun?: bool, batchSize?: 1..5000 (500), cursor?}"
        ) { request, context in
            let p = request.params
            try p.expectOnly("campaign", "tier", "createdFrom", "createdBefore", "expiresAt", "reason", "actor", "dryRun", "batchSize", "cursor")
            let definition = try Self.definition(p)
            let cohort = Grandfather.Cohort(
                createdFrom: try p.optionalTimestamp("createdFrom"),
                createdBefore: try p.requireTimestamp("createdBefore"))
            if let from = cohort.createdFrom, from >= cohort.createdBefore {
                throw RPCError.invalidParams("\"createdFrom\" must be before \"createdBefore\"", field: "createdFrom")
            }
            let actor = try p.requireActor()
            let dryRun = try p.optionalBool("dryRun") ?? false
            let batchSize = try p.optionalInt("batchSize", in: 1...5000) ?? 500
            var cursor: Grandfather.Cursor?
            if let text = try p.optionalString("cursor", maxLength: 200) {
                guard let parsed = Grandfather.Cursor(text) else {
                    throw RPCError.invalidParams("\"cursor\" is not a cursor returned by this method", field: "cursor")
                }
                cursor = parsed
            }
            let db = try context.requireDatabase()
            let now = context.clock.now()
            if dryRun {
                let preview = try Grandfather.preview(cohort, campaign: definition.campaign, on: db)
                return [
                    "dryRun": true, "campaign": .string(definition.campaign), "count": .int(Int64(preview.count)),
                    "alreadyMembers": .int(Int64(preview.alreadyMembers)), "sample": .array(preview.sample.map(JSON.string)),
                ]
            }
            let batch = try Grandfather.applyCohortBatch(
                definition, cohort: cohort, cursor: cursor, batchSize: batchSize,
                actor: actor, now: now, on: db)
            return [
                "dryRun": false, "campaign": .string(definition.campaign), "scanned": .int(Int64(batch.scanned)),
                "applied": .int(Int64(batch.applied.count)), "alreadyMembers": .int(Int64(batch.alreadyMembers)),
                "nextCursor": JSON(batch.nextCursor?.text), "done": .bool(batch.nextCursor == nil),
            ]
        }
        register(
            "grandfather.applyUsers",
            summary: "Give a campaign's tier to hand-picked users (all or nothing: an unknown id is error 1001); idempotent",
            params: "{campaign, tier: plus|pro, userIds: [id] (at most 1000), expiresAt?, reason, actor, dryRun?: bool}"
        ) { request, context in
            let p = request.params
            try p.expectOnly("campaign", "tier", "userIds", "expiresAt", "reason", "actor", "dryRun")
            let definition = try Self.definition(p)
            let elements = try p.requireArray("userIds")
            guard !elements.isEmpty, elements.count <= 1000 else {
                throw RPCError.invalidParams("\"userIds\" must hold 1 to 1000 ids", field: "userIds")
            }
            var userIds: [String] = []
            for (index, element) in elements.enumerated() {
                guard let id = element.stringValue, idPattern.matches(id) else {
                    throw RPCError.invalidParams("\"userIds[\(index)]\" must be a user id matching users.idPattern", field: "userIds[\(index)]")
                }
                userIds.append(id)
            }
            let actor = try p.requireActor()
            let db = try context.requireDatabase()
            // An erased id is refused, as by every admin method naming a user (SPEC §19).
            if let erased = try ErasedUsers.erased(userIds, on: db).min() { throw BillingError.userDeleted(erased) }
            if try p.optionalBool("dryRun") ?? false {
                let known = try UserDirectory.knownUsers(userIds, on: db)
                return [
                    "dryRun": true, "campaign": .string(definition.campaign), "count": .int(Int64(known.count)),
                    "unknown": .array(userIds.filter { !known.contains($0) }.map(JSON.string)),
                ]
            }
            let outcome = try Grandfather.applyUsers(definition, userIds: userIds, actor: actor, now: context.clock.now(), on: db)
            return [
                "dryRun": false, "campaign": .string(definition.campaign), "applied": .int(Int64(outcome.applied.count)),
                "alreadyMembers": .int(Int64(outcome.alreadyMembers)),
            ]
        }
        register(
            "grandfather.audit",
            summary: "What grandfathering applied, to whom, when, by whom, under which campaign (oldest first; page with nextCursor)",
            params: "{campaign?, userId?, cursor?: integer, limit?: 1..5000 (100)}"
        ) { request, context in
            let p = request.params
            try p.expectOnly("campaign", "userId", "cursor", "limit")
            let campaign = try p.optionalString("campaign", maxLength: 64)
            let userId = try p.optionalString("userId", maxLength: 128)
            let cursor = try p.optionalInt("cursor", in: 0...Int.max) ?? 0
            let limit = try p.optionalInt("limit", in: 1...5000) ?? 100
            let db = try context.requireDatabase()
            let now = context.clock.now()
            var query: SQLQuery = """
                SELECT id, actor, peer_uid, peer_user, action, target_user_id, campaign, detail, created_at FROM audit_log
                WHERE action IN ('grandfather.apply', 'grandfather.revoke') AND id > \(cursor)
                """
            if let campaign { query.append(" AND campaign = \(campaign)") }
            if let userId { query.append(" AND target_user_id = \(userId)") }
            query.append(" ORDER BY id LIMIT \(limit + 1)")
            let rows = try db.query(query)
            var entries: [JSON] = []
            for row in rows.prefix(limit) { entries.append(try AuditLog.entryJSON(row)) }
            var result: JSONObject = [
                "entries": .array(entries),
                "nextCursor": rows.count > limit ? .int(Int64(try rows[limit - 1].uint64("id"))) : .null,
            ]
            if let campaign {
                guard let stored = try Grandfather.loadCampaign(campaign, on: db) else {
                    throw BillingError.notFound("campaign", ["campaign": .string(campaign)])
                }
                var summary = stored.json(at: now).objectValue ?? [:]
                summary["members"] = .int(
                    Int64(try db.queryOne("SELECT COUNT(*) AS n FROM billing_campaign_members WHERE campaign = \(campaign)")?.int("n") ?? 0))
                let audited = try db.queryOne(
                    """
                    SELECT COUNT(*) AS entries, COUNT(DISTINCT target_user_id) AS users FROM audit_log
                    WHERE action = 'grandfather.apply' AND campaign = \(campaign)
                    """)
                summary["auditEntries"] = .int(Int64(try audited?.int("entries") ?? 0))
                summary["auditedMembers"] = .int(Int64(try audited?.int("users") ?? 0))
                result["campaign"] = .object(summary)
            }
            return .object(result)
        }
        register(
            "grandfather.revoke", summary: "End a campaign: its members lose its tier from now on (memberships and audit stay)",
            params: "{campaign, actor, reason?}"
        ) { request, context in
            try request.params.expectOnly("campaign", "actor", "reason")
            let campaign = try request.params.requireNonEmptyString("campaign", maxLength: 64)
            let actor = try request.params.requireActor()
            let reason = try request.params.optionalString("reason", maxLength: 255)
            let now = context.clock.now()
            let outcome = try Grandfather.revoke(campaign: campaign, actor: actor, reason: reason, now: now, on: try context.requireDatabase())
            var result = outcome.campaign.json(at: now).objectValue ?? [:]
            result["members"] = .int(Int64(outcome.members))
            result["changed"] = .bool(outcome.changed)
            return .object(result)
        }
    }

    private static func definition(_ p: RPCParams) throws(RPCError) -> Grandfather.Definition {
        Grandfather.Definition(
            campaign: try p.requireNonEmptyString("campaign", maxLength: 64), tier: try p.requireTier(),
            expiresAt: try p.optionalTimestamp("expiresAt"),
            reason: try p.requireNonEmptyString("reason", maxLength: 255))
    }
}
