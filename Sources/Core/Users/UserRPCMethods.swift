extension RPCMethodRegistry where Context: RPCContextProtocol {
    /// `users.import` and `users.delete`; an erasure also drops the user's live channel from
    /// nginx when live changes are on (`liveChannels`).
    mutating func registerUserMethods(
        idPattern: UserIdPattern, bindingPolicy: BillingConfiguration.Binding.Policy, liveChannels: LivePublisherSocket? = nil
    ) {
        register(
            "users.import",
            summary: "Import users with their original sign-up time (idempotent; createdAt drives grandfather cohorts; waiting store events fold in)",
            params: "{users: [{id, createdAt: ISO-8601}] (at most 10000), actor}"
        ) { request, context in
            try request.params.expectOnly("users", "actor")
            let actor = try request.params.requireActor()
            let users = try request.params.requireObjects("users", atMost: 10_000, noun: "users") { (params: RPCParams) throws(RPCError) in
                try params.expectOnly("id", "createdAt")
                return UserAdmin.ImportedUser(
                    id: try params.requireUserId("id", pattern: idPattern), createdAt: try params.requireTimestamp("createdAt"))
            }
            let result = try UserAdmin.importUsers(users, actor: actor, now: context.clock.now(), on: try context.requireDatabase())
            return [
                "received": .int(Int64(users.count)), "inserted": .int(Int64(result.inserted)),
                "existing": .int(Int64(result.existing)), "claimedEvents": .array(result.claimed.map(JSON.string)),
            ]
        }
        register(
            "users.delete",
            summary:
                "Erase a user (SPEC §19): his access, bindings, grants, campaigns, ladder stages, usage and paywall events go, his payloads are scrubbed, his events and audits re-keyed to a tombstone; the id is refused from then on; audited",
            params: "{userId, actor, reason?}"
        ) { request, context in
            try request.params.expectOnly("userId", "actor", "reason")
            let userId = try request.params.requireUserId(pattern: idPattern)
            let actor = try request.params.requireActor()
            let reason = try request.params.optionalString("reason", maxLength: 255)
            let now = context.clock.now()
            let result = try UserAdmin.delete(
                userId: userId, actor: actor, reason: reason, now: now,
                policy: bindingPolicy, on: try context.requireDatabase())
            var removed = JSONObject()
            for table in result.removed.keys.sorted() { removed[table] = .int(Int64(result.removed[table]!)) }
            // After the commit: the changes nginx keeps for his waiting app (up to 10 minutes)
            // go now, and his waiting connections close. nginx unreachable: they expire.
            let liveChannel: String
            if let liveChannels {
                do { liveChannel = try liveChannels.dropChannel(of: userId) ? "dropped" : "absent" } catch { liveChannel = "unreachable" }
            } else {
                liveChannel = "off"
            }
            return [
                "userId": .string(userId), "deleted": .bool(!result.alreadyDeleted), "alreadyDeleted": .bool(result.alreadyDeleted),
                "deletedAt": JSON(result.deletedAt?.iso8601),
                "unboundSubscriptions": .array(result.unboundSubscriptions.map(JSON.string)),
                "removed": .object(removed), "scrubbedEvents": .int(Int64(result.scrubbedEvents)),
                "liveChannel": .string(liveChannel),
            ]
        }
    }
}
