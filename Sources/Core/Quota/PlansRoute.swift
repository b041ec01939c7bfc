/// `GET /api/v1/billing/plans`: the plan contract in force (public, cacheable), for paywall
/// copy. (`POST /api/v1/billing/usage` is `UsageRoute`, in Access: consuming reads the
/// user's snapshot.)
struct PlansRoute: Sendable {
    let plans: PlanCatalog

    func handle(_ request: HTTPRequest, _ context: some DatabaseRequestContext) throws -> HTTPResponse {
        let db = try context.requireDatabase()
        let plan = PlanCatalog.plan(in: try plans.plans(on: db), at: context.clock.now())
        var response = HTTPResponse.json(
            .ok,
            [
                "planVersion": .int(Int64(plan.version)),
                "publishedAt": .string(plan.publishedAt.iso8601), "contract": plan.contract.json,
            ])
        response.headers["Cache-Control"] = "public, max-age=60"
        response.headers["ETag"] = "\"plan-v\(plan.version)\""
        return response
    }
}
