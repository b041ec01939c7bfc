/// What the `plans.*` methods need of their context.
protocol PlanRPCContext: RPCContextProtocol {
    var plans: PlanCatalog { get }
}

extension RPCMethodRegistry where Context: PlanRPCContext {
    /// `plans.list` and `plans.publish`: the versioned plan contracts (SPEC §7).
    mutating func registerPlanMethods() {
        register("plans.list", summary: "Every published plan contract, oldest first, and the version in force now",
                 params: "none") { request, context in
            try request.params.expectOnly()
            let db = try context.requireDatabase()
            context.plans.invalidate()
            let plans = try context.plans.plans(on: db)
            let now = context.clock.now()
            return ["current": .int(Int64(PlanCatalog.plan(in: plans, at: now).version)),
                    "versions": .array(plans.map { plan in
                        ["version": .int(Int64(plan.version)), "publishedAt": .string(plan.publishedAt.iso8601),
                         "contract": plan.contract.json]
                    })]
        }
        register("plans.publish",
                 summary: "Publish a new immutable plan contract (validated); windows starting from effectiveAt use it",
                 params: "{contract: object, actor: string, effectiveAt?: ISO-8601 (default now, never in the past)}") { request, context in
            try request.params.expectOnly("contract", "actor", "effectiveAt")
            let actor = try request.params.requireString("actor", maxLength: 128)
            let contractJSON = JSON.object(try request.params.requireObject("contract"))
            let contract: PlanContract
            do throws(PlanContractError) {
                contract = try PlanContract(json: contractJSON)
            } catch {
                throw RPCError(code: RPCError.Code.invalidParams, message: "Invalid params",
                               data: ["field": "contract", "problems": .array(error.problems.map(JSON.string))])
            }
            let now = context.clock.now()
            let effectiveAt = try request.params.optionalTimestamp("effectiveAt") ?? now
            guard effectiveAt >= now.adding(seconds: -1) else {
                throw RPCError.invalidParams("effectiveAt must not be in the past: running windows keep their version")
            }
            let db = try context.requireDatabase()
            let version = try db.transaction(retries: 3) { db -> Int in
                let next = (try db.queryOne("SELECT COALESCE(MAX(version), 0) + 1 AS next FROM plan_versions FOR UPDATE")?.int("next")) ?? 1
                try db.execute("""
                    INSERT INTO plan_versions (version, contract, published_at, published_by)
                    VALUES (\(next), \(contract.json), \(effectiveAt), \(actor))
                    """)
                try AuditLog.write(actor: actor, action: "plans.publish",
                                   detail: ["version": .int(Int64(next)), "effectiveAt": .string(effectiveAt.iso8601)], now: now, on: db)
                return next
            }
            context.plans.invalidate()
            return ["version": .int(Int64(version)), "effectiveAt": .string(effectiveAt.iso8601)]
        }
    }
}
