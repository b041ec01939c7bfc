extension RPCMethodRegistry where Context: RPCContextProtocol {
    /// `stats.subscriptions` and `stats.purgePaywallEvents` (docs/stats.md).
    /// `reportingCurrency`: `reporting.currency`, the default currency of revenue and MRR.
    mutating func registerStatsMethods(catalog: ProductCatalog, reportingCurrency: String) {
        register(
            "stats.subscriptions",
            summary: "Subscription analytics over [from, to): snapshots, counts vs the previous period, MRR, funnel, daily series, recent events",
            params:
                "{from: ISO-8601, to: ISO-8601, environment: \"production\"|\"sandbox\", currency?: ISO 4217 (default reporting.currency), timeZone?: IANA zone or +HH:MM (default UTC)}"
        ) { request, context in
            try request.params.expectOnly("from", "to", "environment", "currency", "timeZone")
            let from = try request.params.requireTimestamp("from")
            let to = try request.params.requireTimestamp("to")
            let environment = try request.params.requireEnvironment()
            let currency = try request.params.optionalString("currency", maxLength: 3) ?? reportingCurrency
            guard currency.utf8.count == 3, currency.utf8.allSatisfy({ $0 >= 65 && $0 <= 90 }) else {
                throw RPCError.invalidParams("\"currency\" must be an ISO 4217 code such as EUR")
            }
            let timeZone = try request.params.optionalString("timeZone", maxLength: 64)
            guard let db = context.database else { throw RPCError(code: RPCError.Code.unavailable, message: "no database configured") }
            do {
                return try SubscriptionStats.compute(
                    SubscriptionStats.Query(from: from, to: to, environment: environment, currency: currency, timeZone: timeZone),
                    now: context.clock.now(), cadence: catalog.cadence(of:), on: db)
            } catch let error as SubscriptionStats.QueryError {
                switch error {
                case .emptyPeriod: throw RPCError.invalidParams("\"to\" must be after \"from\"")
                case .periodTooLong: throw RPCError.invalidParams("the period may span at most \(SubscriptionStats.maximumPeriodDays) days")
                case .unknownTimeZone(let zone):
                    throw RPCError.invalidParams(
                        "unknown \"timeZone\" \(zone): use an IANA name (MariaDB time zone tables) or an offset such as +02:00")
                }
            }
        }
        register(
            "stats.purgePaywallEvents",
            summary:
                "Delete paywall events older than 30 days now, audited with the cutoff and the count (workers also purge on their own every 10 minutes)",
            params: "{limit?: 1..1000000 rows (default 100000), actor}"
        ) { request, context in
            try request.params.expectOnly("limit", "actor")
            let limit = try request.params.optionalInt("limit", in: 1...1_000_000) ?? 100_000
            let actor = try request.params.requireActor()
            guard let db = context.database else { throw RPCError(code: RPCError.Code.unavailable, message: "no database configured") }
            let removed = try PaywallEvents.purge(now: context.clock.now(), limit: limit, actor: actor, on: db)
            return ["deleted": .int(Int64(removed))]
        }
    }
}
