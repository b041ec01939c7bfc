extension RPCMethodRegistry where Context: RPCContextProtocol {
    /// `flags.get`, `flags.set`.
    mutating func registerFlagMethods() {
        register("flags.get", summary: "Runtime flags as stored (workers see a change within a second)", params: "none") { request, context in
            try request.params.expectOnly()
            let db = try context.requireDatabase()
            var result = try BillingFlags.load(on: db).json.objectValue ?? [:]
            if let row = try db.queryOne("SELECT updated_by, updated_at FROM billing_flags ORDER BY updated_at DESC LIMIT 1") {
                result["updatedBy"] = .string(try row.string("updated_by"))
                result["updatedAt"] = .string(try row.timestamp("updated_at").iso8601)
            }
            return .object(result)
        }
        register(
            "flags.set",
            summary:
                "Set flags, each audited: enforcement (observe: record, answer 200; enforce: answer 402 past a limit), purchases.enabled (false: the app's purchases answer 403, store notifications still flow)",
            params: "{enforcement?: observe|enforce, \"purchases.enabled\"?: boolean, actor} (at least one flag)"
        ) { request, context in
            let names = BillingFlags.Name.allCases
            try request.params.expectOnly(names.map(\.rawValue) + ["actor"])
            let actor = try request.params.requireActor()
            var updates: [(BillingFlags.Name, String)] = []
            for name in names {
                guard let value = try request.params.optionalValue(name.rawValue) else { continue }
                guard let stored = name.stored(value) else {
                    throw RPCError.invalidParams(
                        "\"\(name.rawValue)\" must be \(name == .purchasesEnabled ? "a boolean" : "one of " + name.values.joined(separator: ", "))",
                        field: name.rawValue)
                }
                updates.append((name, stored))
            }
            guard !updates.isEmpty else {
                throw RPCError.invalidParams("name a flag: \(names.map(\.rawValue).joined(separator: ", "))")
            }
            let db = try context.requireDatabase()
            let now = context.clock.now()
            var result = JSONObject()
            let previousValues = try BillingFlags.set(updates, actor: actor, now: now, on: db)
            for ((name, value), previous) in zip(updates, previousValues) {
                result[name.rawValue] = name.json(value)
                if updates.count == 1 {
                    result["previous"] = name.json(previous)
                    result["changed"] = .bool(previous != value)
                } else {
                    result["previous." + name.rawValue] = name.json(previous)
                }
            }
            return .object(result)
        }
    }
}
