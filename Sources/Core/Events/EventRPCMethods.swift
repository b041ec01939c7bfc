extension RPCMethodRegistry where Context: RPCContextProtocol {
    /// `events.list`, `events.reproject`, `events.retryQuarantined`. `replayers` maps a
    /// quarantine provider to its replay function (each provider feature adds its own).
    mutating func registerEventMethods(idPattern: UserIdPattern, replayers: QuarantineReplayers) {
        register(
            "events.list", summary: "Inbox events newest first, without payloads (page with nextCursor)",
            params:
                "{userId?, provider?: \(EventProvider.allCases.map(\.rawValue).joined(separator: "|")), status?: applied|unmatched|ignored|failed, cursor?: integer, limit?: 1..1000 (50)}"
        ) { request, context in
            let p = request.params
            try p.expectOnly("userId", "provider", "status", "cursor", "limit")
            let userId = try p.optionalString("userId", maxLength: 128)
            if let userId { try ErasedUsers.refuseErased(userId, on: try context.requireDatabase()) }
            let provider = try p.optionalString("provider", oneOf: EventProvider.allCases.map(\.rawValue))
            let status = try p.optionalString("status", oneOf: ["applied", "unmatched", "ignored", "failed"])
            let cursor = try p.optionalInt("cursor", in: 1...Int.max).map(UInt64.init)
            let limit = try p.optionalInt("limit", in: 1...1000) ?? 50
            let page = try EventAdmin.list(
                userId: userId, provider: provider, status: status, cursor: cursor, limit: limit,
                on: try context.requireDatabase())
            return ["events": .array(page.events), "nextCursor": page.nextCursor.map { .int(Int64($0)) } ?? .null]
        }
        register(
            "events.reproject",
            summary: "Re-fold a user's store access from the inbox, store it, and report every difference from the stored rows",
            params: "{userId, actor}"
        ) { request, context in
            try request.params.expectOnly("userId", "actor")
            let userId = try request.params.requireLiveUserId(pattern: idPattern, on: try context.requireDatabase())
            let actor = try request.params.requireActor()
            let outcome = try EventAdmin.reproject(userId: userId, actor: actor, now: context.clock.now(), on: try context.requireDatabase())
            return [
                "userId": .string(userId), "consistent": .bool(outcome.differences.isEmpty),
                "differences": .array(outcome.differences.map(\.json)), "revision": .int(Int64(outcome.result.revision)),
                "appliedEvents": .int(Int64(outcome.result.projection.appliedEvents)),
                "subscriptions": .int(Int64(outcome.result.projection.subscriptions.count)),
            ]
        }
        register(
            "events.retryQuarantined",
            summary: "Re-run quarantined deliveries (after fixing trust or secrets) through their provider's replayer; one outcome per row",
            params:
                "{ids?: [integer] | all?: true, afterId?: integer (with all: open rows after this id, to page), limit?: 1..1000 (100), actor} → {results, replayers, nextAfterId (all: the last id looked at; null once no open row is left after it)}"
        ) { request, context in
            let p = request.params
            try p.expectOnly("ids", "all", "afterId", "limit", "actor")
            let actor = try p.requireActor()
            let all = try p.optionalBool("all") ?? false
            let idValues = try p.optionalArray("ids")
            var ids: [UInt64]?
            if let idValues {
                guard !all else { throw RPCError.invalidParams("give either \"ids\" or \"all\", not both", field: "all") }
                guard !idValues.isEmpty, idValues.count <= 1000 else { throw RPCError.invalidParams("\"ids\" must hold 1 to 1000 ids", field: "ids") }
                ids = try idValues.enumerated().map { (index, value) throws(RPCError) -> UInt64 in
                    guard let id = value.int64Value, id > 0 else {
                        throw RPCError.invalidParams("\"ids[\(index)]\" must be a positive integer", field: "ids[\(index)]")
                    }
                    return UInt64(id)
                }
            } else if !all {
                throw RPCError.invalidParams("give \"ids\" or \"all\": true", field: "ids")
            }
            let limit = try p.optionalInt("limit", in: 1...1000) ?? 100
            let afterId = try p.optionalInt("afterId", in: 0...Int.max)
            if afterId != nil, !all { throw RPCError.invalidParams("\"afterId\" pages \"all\": true", field: "afterId") }
            let db = try context.requireDatabase()
            let results = try replayers.retry(
                ids: ids, afterId: afterId.map(UInt64.init) ?? 0, limit: limit, actor: actor,
                now: context.clock.now(), on: db)
            var answer: JSONObject = ["results": .array(results), "replayers": .array(replayers.providers.map(JSON.string))]
            if all {
                // Paging by id: a row still failing stays open, so the next page starts after it.
                let last = results.compactMap { $0["id"]?.int64Value }.max()
                answer["nextAfterId"] = results.count < limit ? .null : last.map(JSON.int) ?? .null
            }
            return .object(answer)
        }
    }
}
