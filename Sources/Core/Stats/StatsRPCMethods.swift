extension RPCMethodRegistry where Context: RPCContextProtocol {
    /// `stats.subscriptions`, `stats.snapshots`, `stats.cohorts`, `rates.import`, `rates.list`,
    /// `stats.refresh` and `stats.purgePaywallEvents` (docs/stats.md).
    /// `reportingCurrency`: `reporting.currency`, the default currency of revenue and MRR.
    mutating func registerStatsMethods(catalog: ProductCatalog, reportingCurrency: String) {
        register(
            "stats.subscriptions",
            summary: "Subscription analytics over [from, to): snapshots, counts vs the previous period, MRR, funnel, daily series, recent events",
            params:
                "{from: ISO-8601, to: ISO-8601, environment: \"production\"|\"sandbox\", currency?: ISO 4217 (default reporting.currency), timeZone?: IANA zone or +HH:MM (default UTC)}"
        ) { request, context in
            try request.params.expectOnly("from", "to", "environment", "currency", "timeZone")
            let query = try request.params.requireStatsQuery(reportingCurrency: reportingCurrency, timeZone: true)
            guard let db = context.database else { throw RPCError(code: RPCError.Code.unavailable, message: "no database configured") }
            do {
                return try SubscriptionStats.compute(query, now: context.clock.now(), cadence: catalog.cadence(of:), on: db)
            } catch let error as SubscriptionStats.QueryError {
                throw error.rpcError(maximumDays: SubscriptionStats.maximumPeriodDays)
            }
        }
        register(
            "stats.snapshots",
            summary: "The snapshot (active, trial, paying, cancelling, MRR) at each of up to 100 instants: a series of MRR and subscriptions",
            params:
                "{at: [ISO-8601] (1..\(SubscriptionStats.maximumSnapshots)), environment: \"production\"|\"sandbox\", currency?: ISO 4217 (default reporting.currency)}"
        ) { request, context in
            try request.params.expectOnly("at", "environment", "currency")
            let environment = try request.params.requireEnvironment()
            let currency = try request.params.reportingCurrency(default: reportingCurrency)
            let list = try request.params.requireArray("at")
            guard (1...SubscriptionStats.maximumSnapshots).contains(list.count) else {
                throw RPCError.invalidParams("\"at\" must name 1 to \(SubscriptionStats.maximumSnapshots) instants", field: "at")
            }
            var instants: [Timestamp] = []
            for item in list {
                guard let text = item.stringValue, let t = Timestamp(iso8601: text) else {
                    throw RPCError.invalidParams("\"at\" must hold ISO-8601 instants such as 2026-03-01T00:00:00Z", field: "at")
                }
                instants.append(t)
            }
            let db = try context.requireDatabase()
            let now = context.clock.now()
            try SubscriptionStates.refresh(on: db, now: now)
            let snapshots = try SubscriptionStats.snapshots(
                at: instants.map { min($0, now) }, environment: environment.rawValue, currency: currency,
                cadence: catalog.cadence(of:), on: db)
            return [
                "environment": .string(environment.rawValue), "currency": .string(currency), "snapshots": .array(snapshots.map(\.json)),
            ]
        }
        register(
            "stats.cohorts",
            summary:
                "Cohorts by UTC month of the first paid period: subscribers, the share still paying at each following month, realized revenue and LTV up to to",
            params:
                "{from: ISO-8601, to: ISO-8601 (at most \(SubscriptionStats.maximumCohortDays) days), environment: \"production\"|\"sandbox\", by?: \"month\", currency?: ISO 4217 (default reporting.currency)}"
        ) { request, context in
            try request.params.expectOnly("from", "to", "environment", "by", "currency")
            let query = try request.params.requireStatsQuery(reportingCurrency: reportingCurrency, timeZone: false)
            if let by = try request.params.optionalString("by", maxLength: 16), by != "month" {
                throw RPCError.invalidParams("\"by\" must be \"month\" (cohorts are calendar months, UTC)", field: "by")
            }
            do {
                return try SubscriptionStats.cohorts(query, now: context.clock.now(), on: try context.requireDatabase())
            } catch let error as SubscriptionStats.QueryError {
                throw error.rpcError(maximumDays: SubscriptionStats.maximumCohortDays)
            }
        }
        register(
            "rates.import",
            summary:
                "Store exchange rates (units of a currency per euro by day, e.g. the ECB reference rates: billing-admin rates.import --file eurofxref-hist.csv); a changed value replaces the old one, the same value is left as it was; audited",
            params:
                "{rates: [{date: YYYY-MM-DD, currency: ISO 4217 (not EUR), perEUR: decimal string such as \"1.0856\"}] (at most 10000), source, actor}"
        ) { request, context in
            try request.params.expectOnly("rates", "source", "actor")
            let actor = try request.params.requireActor()
            let source = try request.params.requireNonEmptyString("source", maxLength: 64)
            var seen = Set<CurrencyAmounts.Key>()
            let entries = try request.params.requireObjects("rates", atMost: 10_000, noun: "rates") { (params: RPCParams) throws(RPCError) in
                try params.expectOnly("date", "currency", "perEUR")
                let entry = ExchangeRates.Entry(
                    currency: try params.requireCurrency("currency", allowEuro: false), day: try params.requireDay("date"),
                    rate: try params.requireRate("perEUR"))
                guard seen.insert(CurrencyAmounts.Key(currency: entry.currency, day: entry.day)).inserted else {
                    throw RPCError.invalidParams("\(entry.currency) on \(entry.day) is given twice", field: "date")
                }
                return entry
            }
            let result = try ExchangeRates.importRates(
                entries, source: source, actor: actor, now: context.clock.now(), on: try context.requireDatabase())
            return [
                "received": .int(Int64(entries.count)), "inserted": .int(Int64(result.inserted)),
                "updated": .int(Int64(result.updated)), "unchanged": .int(Int64(result.unchanged)),
            ]
        }
        register(
            "rates.list",
            summary: "The exchange rates held: per currency its first and last day and latest rate; with currency, its rates latest first",
            params: "{currency?: ISO 4217, from?: YYYY-MM-DD, to?: YYYY-MM-DD, limit?: 1..10000 (default 100)}"
        ) { request, context in
            try request.params.expectOnly("currency", "from", "to", "limit")
            let currency =
                try request.params.optionalValue("currency") == nil ? nil : try request.params.requireCurrency("currency", allowEuro: false)
            let from = try request.params.optionalValue("from") == nil ? nil : try request.params.requireDay("from")
            let to = try request.params.optionalValue("to") == nil ? nil : try request.params.requireDay("to")
            let limit = try request.params.optionalInt("limit", in: 1...10_000) ?? 100
            return try ExchangeRates.list(currency: currency, from: from, to: to, limit: limit, on: try context.requireDatabase())
        }
        register(
            "stats.refresh",
            summary:
                "Derive the stored subscription states (billing_subscription_states) of every subscription whose inbox rows changed, now; billing-rpc also does it every few seconds and before each statistic",
            params: "{}"
        ) { request, context in
            try request.params.expectOnly()
            let r = try SubscriptionStates.refresh(on: try context.requireDatabase(), now: context.clock.now())
            return [
                "subscriptions": .int(Int64(r.subscriptions)), "late": .int(Int64(r.late)), "foldedOn": .int(Int64(r.foldedOn)),
                "states": .int(Int64(r.states)),
                "pending": .int(r.pending), "confined": .int(Int64(r.confined)),
            ]
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

extension SubscriptionStats.QueryError {
    /// The -32602 an operator reads for a query the stats refuse.
    func rpcError(maximumDays: Int64) -> RPCError {
        switch self {
        case .emptyPeriod: return .invalidParams("\"to\" must be after \"from\"")
        case .periodTooLong: return .invalidParams("the period may span at most \(maximumDays) days")
        case .unknownTimeZone(let zone):
            return .invalidParams("unknown \"timeZone\" \(zone): use an IANA name (MariaDB time zone tables) or an offset such as +02:00")
        }
    }
}

extension RPCParams {
    /// `from`, `to`, `environment`, `currency` (default `reporting.currency`) and, when the
    /// method takes one, `timeZone` of a stats query.
    func requireStatsQuery(reportingCurrency: String, timeZone: Bool) throws(RPCError) -> SubscriptionStats.Query {
        SubscriptionStats.Query(
            from: try requireTimestamp("from"), to: try requireTimestamp("to"), environment: try requireEnvironment(),
            currency: try self.reportingCurrency(default: reportingCurrency),
            timeZone: timeZone ? try optionalString("timeZone", maxLength: 64) : nil)
    }

    /// `currency` when given (any ISO 4217 code, EUR included), else `fallback`.
    func reportingCurrency(default fallback: String) throws(RPCError) -> String {
        try optionalValue("currency") == nil ? fallback : try requireCurrency("currency", allowEuro: true)
    }

    /// An ISO 4217 code: three capital letters (EUR refused unless `allowEuro`: the base of
    /// the rates, 1 by definition).
    func requireCurrency(_ key: String, allowEuro: Bool) throws(RPCError) -> String {
        let code = try requireString(key, maxLength: 3)
        guard code.utf8.count == 3, code.utf8.allSatisfy({ $0 >= 65 && $0 <= 90 }) else {
            throw .invalidParams("\"\(key)\" must be an ISO 4217 code such as EUR", field: key)
        }
        guard allowEuro || code != "EUR" else {
            throw .invalidParams("\"\(key)\" EUR is the base of every rate (1 by definition), not a rate", field: key)
        }
        return code
    }

    /// A calendar day, `YYYY-MM-DD`.
    func requireDay(_ key: String) throws(RPCError) -> RateDay {
        let text = try requireString(key, maxLength: 10)
        guard let day = RateDay(iso8601: text) else { throw .invalidParams("\"\(key)\" must be a day such as 2026-03-31", field: key) }
        return day
    }

    /// A rate: a plain positive decimal with at most 8 decimals, as a string (exact) or a
    /// JSON number (read through its shortest decimal form).
    func requireRate(_ key: String) throws(RPCError) -> ExchangeRate {
        let text: String
        switch try requireValue(key) {
        case .string(let s): text = s
        case .int(let n): text = String(n)
        case .double(let d): text = d.description
        default: throw .invalidParams("\"\(key)\" must be a decimal such as \"1.0856\"", field: key)
        }
        guard let rate = ExchangeRate(decimal: text) else {
            throw .invalidParams(
                "\"\(key)\" must be a positive decimal with at most \(ExchangeRate.decimals) decimals such as \"1.0856\", got \(text)",
                field: key)
        }
        return rate
    }
}
