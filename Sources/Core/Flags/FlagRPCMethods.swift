extension RPCMethodRegistry where Context: RPCContextProtocol {
    /// `flags.get`, `flags.set`.
    mutating func registerFlagMethods() {
        register("flags.get", summary: "Runtime flags as stored (workers see a change within a second)", params: "none") { request, context in
            try request.params.expectOnly()
            let db = try context.requireDatabase()
            var result = try BillingFlags.load(on: db).json.objectValue ?? [:]
            if let row = try db.queryOne("SELECT updated_by, updated_at FROM billing_flags WHERE name = 'enforcement'") {
                result["updatedBy"] = .string(try row.string("updated_by"))
                result["updatedAt"] = .string(try row.timestamp("updated_at").iso8601)
            }
            return .object(result)
        }
        register("flags.set", summary: "Set enforcement: observe (record, answer 200) or enforce (answer 402 past a limit); audited",
                 params: "{enforcement: observe|enforce, actor}") { request, context in
            try request.params.expectOnly("enforcement", "actor")
            let value = BillingFlags.Enforcement(rawValue: try request.params.requireString("enforcement", oneOf: ["observe", "enforce"]))!
            let actor = try request.params.requireActor()
            let previous = try BillingFlags.setEnforcement(value, actor: actor, now: context.clock.now(), on: try context.requireDatabase())
            return ["enforcement": .string(value.rawValue), "previous": .string(previous.rawValue), "changed": .bool(previous != value)]
        }
    }
}
