/// `POST /api/v1/billing/usage`: the signed-in user consumes his plan (SPEC §7).
struct UsageRoute: Sendable {
    let plans: PlanCatalog
    let flags: FlagCache
    let metrics: BillingMetrics

    /// `{meter, amount, idempotencyKey}` with a Bearer ID token. The same key answers the
    /// first answer again and never counts twice; enforce mode answers 402
    /// `{"error": {"code": "quota_exceeded", "meter", "placement", ...}}` and records nothing.
    func handle(_ request: HTTPRequest, _ context: some UserRequestContext) throws -> HTTPResponse {
        let userId = try context.authenticatedUser(request)
        let body = try request.jsonBody(limits: JSONLimits(maxBytes: 16_384, maxDepth: 8))
        let reader = try PayloadReader(body, path: "")
        let meter = try reader.requiredString("meter", maxLength: 64)
        let key = try reader.requiredString("idempotencyKey", maxLength: 128)
        guard let amountValue = reader.value("amount") else { throw PayloadError("amount", "required integer") }
        guard let amount = amountValue.int64Value, (1...1_000_000).contains(amount) else {
            throw PayloadError("amount", "expected an integer in 1...1000000")
        }
        let db = try context.requireDatabase()
        let now = context.clock.now()
        let plans = try self.plans.plans(on: db)
        guard PlanCatalog.plan(in: plans, at: now).contract.meterNames.contains(meter) else {
            throw PayloadError("meter", "unknown meter (GET /api/v1/billing/plans lists them)")
        }
        try UserDirectory.ensureKnownIfNeeded(userId, now: now, on: db)
        let consumption = try ErasedUsers.whileLive(userId, on: db) {
            try AccessSnapshot.consume(
                userId: userId, meter: meter, amount: amount, idempotencyKey: key, now: now,
                plans: plans, enforcement: flags.current(on: db).enforcement, on: db)
        }
        switch consumption {
        case .recorded(let answer):
            let decision: BillingMetrics.UsageDecision = answer["overLimit"]?.boolValue == true ? .overLimit : .allowed
            metrics.usageDecision(decision)
            context.outcome = decision.rawValue
            return .json(.ok, answer)
        case .refused(let meter, let placement, let balance):
            metrics.usageDecision(.refused)
            context.outcome = "quota_exceeded"
            context.logger.info("usage refused", ["usage.meter": .string(meter), "usage.outcome": "quota_exceeded"])
            return .json(
                .paymentRequired,
                [
                    "error": [
                        "code": "quota_exceeded", "message": .string("the \(meter) allowance of this window is used up"),
                        "meter": .string(meter), "placement": JSON(placement), "balance": balance.json,
                    ]
                ])
        }
    }
}
