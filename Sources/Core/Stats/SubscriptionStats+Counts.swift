extension SubscriptionStats {
    // MARK: - Counts over [from, to) and [from - length, from)

    struct DayCounts {
        var current: Bool
        var day: String
        var counts: Counts
    }

    struct Counts {
        var new: Int64 = 0, trials: Int64 = 0, converted: Int64 = 0, renewals: Int64 = 0
        var cancellations: Int64 = 0, lost: Int64 = 0, refunds: Int64 = 0
        var billingIssues: Int64 = 0, revocations: Int64 = 0
        var grossMilli: Int64 = 0, refundedMilli: Int64 = 0
        /// One-time purchases (non-renewing, lifetime, consumable; SPEC §15): their first report.
        var oneTimePurchases: Int64 = 0
        /// New family-shared subscriptions: access, but no sale (counted here only).
        var familyShared: Int64 = 0
        /// Sales: the paid period starts and one-time purchases whose price is in `grossMilli`.
        var sales: Int64 = 0
        /// While the scan runs: the sales and refunds in their own currencies, by purchase
        /// day (`convert` turns them into `grossMilli` and `refundedMilli`).
        var gross = CurrencyAmounts()
        var refunded = CurrencyAmounts()
        /// Per currency without a rate on the purchase day: gross and refunded in it.
        var unconverted: [String: (grossMilli: Int64, refundedMilli: Int64)] = [:]
        /// Per currency sold in: gross and refunded in that currency, and the net of what
        /// converted, in the report's currency (the per-currency parts of `revenueMilli`).
        var byCurrency: [String: (grossMilli: Int64, refundedMilli: Int64, revenueMilli: Int64)] = [:]

        init() {}

        /// Converts the amounts the scan collected into `currency` (the report's): each
        /// (currency, purchase day) sum once, at that day's rate.
        mutating func convert(to currency: String, with rates: ExchangeRates) {
            let sold = gross.converted(to: currency, with: rates)
            let returned = refunded.converted(to: currency, with: rates)
            grossMilli = sold.milli
            refundedMilli = returned.milli
            for (code, milli) in sold.unconverted { unconverted[code, default: (0, 0)].grossMilli = milli }
            for (code, milli) in returned.unconverted { unconverted[code, default: (0, 0)].refundedMilli = milli }
            for code in gross.currencies.union(refunded.currencies) {
                let g = gross.only(code)
                let r = refunded.only(code)
                byCurrency[code] = (
                    g.total, r.total,
                    Money.subtract(g.converted(to: currency, with: rates).milli, r.converted(to: currency, with: rates).milli)
                )
            }
            gross = CurrencyAmounts()
            refunded = CurrencyAmounts()
        }

        /// Adds a group's sums (`eventSums`, grouped by `moneyGroup`).
        mutating func add(_ row: SQLRow) throws(DatabaseError) {
            new += try row.int64("new_count")
            trials += try row.int64("trials")
            familyShared += try row.int64("family_shared")
            converted += try row.int64("converted")
            renewals += try row.int64("renewals")
            oneTimePurchases += try row.int64("one_time")
            billingIssues += try row.int64("billing_issues")
            cancellations += try row.int64("cancellations")
            lost += try row.int64("lost")
            refunds += try row.int64("refunds")
            revocations += try row.int64("revocations")
            try addMoney(row)
        }

        /// Adds a group's sales and amounts (`moneyGroup`, `moneySums`) in their own currency
        /// and purchase day, converted later (`convert`).
        mutating func addMoney(_ row: SQLRow) throws(DatabaseError) {
            let currency = try row.string("money_currency")
            let day = RateDay(try row.timestamp("money_day"))
            sales += try row.int64("sales")
            let gross = try row.saturatedInt64("gross_milli")
            let refundedMilli = try row.saturatedInt64("refunded_milli")
            if gross != 0 { self.gross.add(gross, currency: currency, day: day) }
            if refundedMilli != 0 { refunded.add(refundedMilli, currency: currency, day: day) }
        }

        init(summing days: [DayCounts]) {
            for d in days {
                new += d.counts.new
                trials += d.counts.trials
                converted += d.counts.converted
                renewals += d.counts.renewals
                cancellations += d.counts.cancellations
                lost += d.counts.lost
                refunds += d.counts.refunds
                billingIssues += d.counts.billingIssues
                revocations += d.counts.revocations
                grossMilli = Money.add(grossMilli, d.counts.grossMilli)
                refundedMilli = Money.add(refundedMilli, d.counts.refundedMilli)
                oneTimePurchases += d.counts.oneTimePurchases
                familyShared += d.counts.familyShared
                sales += d.counts.sales
                for (code, u) in d.counts.unconverted {
                    let sum = unconverted[code] ?? (0, 0)
                    unconverted[code] = (Money.add(sum.grossMilli, u.grossMilli), Money.add(sum.refundedMilli, u.refundedMilli))
                }
                for (code, b) in d.counts.byCurrency {
                    let sum = byCurrency[code] ?? (0, 0, 0)
                    byCurrency[code] = (
                        Money.add(sum.grossMilli, b.grossMilli), Money.add(sum.refundedMilli, b.refundedMilli),
                        Money.add(sum.revenueMilli, b.revenueMilli)
                    )
                }
            }
        }

        var json: JSON {
            [
                "new": .int(new), "trials": .int(trials), "converted": .int(converted), "renewals": .int(renewals),
                "cancellations": .int(cancellations), "lost": .int(lost), "refunds": .int(refunds),
                "billingIssues": .int(billingIssues), "revocations": .int(revocations),
                "revenueMilli": .int(Money.subtract(grossMilli, refundedMilli)),
                "grossMilli": .int(grossMilli), "refundedMilli": .int(refundedMilli),
                "oneTimePurchases": .int(oneTimePurchases), "familyShared": .int(familyShared), "sales": .int(sales),
                "unconverted": SubscriptionStats.byCurrencyJSON(
                    unconverted.mapValues { ["grossMilli": .int($0.grossMilli), "refundedMilli": .int($0.refundedMilli)] }),
                "byCurrency": SubscriptionStats.byCurrencyJSON(
                    byCurrency.mapValues {
                        ["grossMilli": .int($0.grossMilli), "refundedMilli": .int($0.refundedMilli), "revenueMilli": .int($0.revenueMilli)]
                    }),
            ]
        }
    }

    /// The local day of an inbox column, in `zone` (validated) or UTC.
    static func localDay(_ expression: SQLQuery, zone: String?) -> SQLQuery {
        guard let zone else { return "DATE(\(expression))" }
        return "DATE(CONVERT_TZ(\(expression), '+00:00', \(zone)))"
    }

    /// The counts of both periods by (period, local day), from the events the refresh
    /// classified (sql/026): the 15-minute buckets that lie wholly in one period and one local
    /// day (`billing_counted_buckets`, their sums kept by the refresh), the classified rows of
    /// the other buckets (at the periods' edges, or across a local midnight in a zone whose
    /// offset is not a multiple of 15 minutes), both summed by MariaDB per period, local day,
    /// currency and purchase day; then, for the rule that depends on the window, the events of
    /// a class whose previous one of that class lies in the same period are taken back out.
    /// The definitions are those of docs/stats.md, per event:
    /// - new: a purchase that is its subscription's first counted event ever (trials: of
    ///   those, the trial ones; familyShared: a family-shared purchase or one-time purchase);
    /// - converted: the first report of a paid period (purchase/renewal, not a trial) whose
    ///   previous purchase/renewal was a trial;
    /// - renewals, gross revenue, one-time purchases: the first report of a period ever (twins
    ///   from both channels share the subscription and the period key COALESCE(purchased_at,
    ///   intrinsic_at)); refunded amount, billing issues: the first of their kind per period key;
    /// - cancellations, lost (expiration/refund/revoke), refunds, revocations: the first of
    ///   its class for the subscription within the same period ([from, to) or the previous):
    ///   the previous one of its class is before the period's start, or there is none.
    /// `StatsCountsRuleTests` checks them against the same definitions written as MariaDB
    /// window functions over the inbox.
    static func dailyCounts(_ q: Query, previousFrom: Timestamp, zone: String?, on db: DatabaseConnection) throws -> [DayCounts] {
        let env = q.environment.rawValue
        let size = SubscriptionStates.bucketMilliseconds
        let (first, to) = (previousFrom.millisecondsSinceEpoch, q.to.millisecondsSinceEpoch)
        func at(_ ms: Int64) -> Timestamp { Timestamp(millisecondsSinceEpoch: ms) }
        func floored(_ ms: Int64) -> Int64 { ms - ((ms % size) + size) % size }
        // Buckets cut by a period's edge are read row by row.
        var edges = Set([first, q.from.millisecondsSinceEpoch, to].filter { $0 % size != 0 }.map(floored))
        let lastWhole = at(to - size)
        let whole: SQLQuery = """
            b.environment = \(env) AND b.bucket_at >= \(previousFrom) AND b.bucket_at <= \(lastWhole)
            """
        var sameDay: SQLQuery = ""
        if zone != nil {
            // A bucket across a local midnight belongs to two days: read row by row too.
            let end: SQLQuery = "TIMESTAMPADD(MICROSECOND, \(size * 1000 - 1000), b.bucket_at)"
            let split: SQLQuery = "\(localDay("b.bucket_at", zone: zone)) <> \(localDay(end, zone: zone))"
            for row in try db.query("SELECT DISTINCT b.bucket_at FROM billing_counted_buckets b WHERE \(whole) AND \(split)") {
                edges.insert(try row.timestamp("bucket_at").millisecondsSinceEpoch)
            }
            sameDay = "AND NOT (\(split))"
        }
        var days: [DayKey: Counts] = [:]
        let read = { (row: SQLRow) throws(DatabaseError) in
            let key = DayKey(current: try row.bool("cur"), day: try row.timestamp("day").millisecondsSinceEpoch)
            try days[key, default: Counts()].add(row)
        }
        let notEdges = SubscriptionStates.padded(edges.sorted().map { SQLValue.timestamp(at($0)) })
        try db.forEachRow(
            """
            SELECT b.bucket_at >= \(q.from) AS cur, \(localDay("b.bucket_at", zone: zone)) AS day, b.money_currency, b.money_day,
              \(unsafeRaw: eventSums.map { "SUM(b.\($0.column)) AS \($0.column)" }.joined(separator: ", "))
            FROM billing_counted_buckets b
            WHERE \(whole) \(sameDay) \(notEdges.isEmpty ? "" : "AND b.bucket_at NOT IN (\(list: notEdges))")
            GROUP BY cur, day, b.money_currency, b.money_day
            """, read)
        let rows = "k.intrinsic_at >= \(previousFrom) AND k.intrinsic_at < \(q.to)" as SQLQuery
        let edgeList = edges.sorted()
        for start in stride(from: 0, to: edgeList.count, by: SubscriptionStates.chunk) {
            var ranges: SQLQuery = ""
            for (n, b) in edgeList[start..<min(start + SubscriptionStates.chunk, edgeList.count)].enumerated() {
                ranges.append("\(unsafeRaw: n > 0 ? " OR " : "")(k.intrinsic_at >= \(at(b)) AND k.intrinsic_at < \(at(b + size)))")
            }
            try db.forEachRow(
                """
                SELECT k.intrinsic_at >= \(q.from) AS cur, \(localDay("k.intrinsic_at", zone: zone)) AS day, \(unsafeRaw: moneyGroup),
                  \(unsafeRaw: sums(eventSums))
                FROM billing_counted_events k
                WHERE k.environment = \(env) AND \(rows) AND (\(ranges))
                GROUP BY cur, day, money_currency, money_day
                """, read)
        }
        // The window's rule: an event whose previous one of its class is in the same period
        // (at or after the period's start) is not the first of its class there.
        let windowStart: SQLQuery = "IF(k.intrinsic_at >= \(q.from), CAST(\(q.from) AS DATETIME(3)), CAST(\(previousFrom) AS DATETIME(3)))"
        try db.forEachRow(
            """
            SELECT k.intrinsic_at >= \(q.from) AS cur, \(localDay("k.intrinsic_at", zone: zone)) AS day,
              SUM(k.kind = 'cancellation' AND COALESCE(k.previous_class_at >= \(windowStart), 0)) AS cancellations,
              SUM(k.kind IN ('expiration', 'refund', 'revoke') AND COALESCE(k.previous_class_at >= \(windowStart), 0)) AS lost,
              SUM(k.kind = 'refund' AND COALESCE(k.previous_kind_at >= \(windowStart), 0)) AS refunds,
              SUM(k.kind = 'revoke' AND COALESCE(k.previous_kind_at >= \(windowStart), 0)) AS revocations
            FROM billing_counted_events k FORCE INDEX (billing_counted_events_previous)
            WHERE k.environment = \(env) AND k.previous_class_at >= \(previousFrom) AND k.previous_class_at < \(q.to) AND \(rows)
            GROUP BY cur, day
            """
        ) { (row: SQLRow) throws(DatabaseError) in
            let key = DayKey(current: try row.bool("cur"), day: try row.timestamp("day").millisecondsSinceEpoch)
            var c = days[key, default: Counts()]
            c.cancellations -= try row.int64("cancellations")
            c.lost -= try row.int64("lost")
            c.refunds -= try row.int64("refunds")
            c.revocations -= try row.int64("revocations")
            days[key] = c
        }
        try convert(&days, to: q.currency, on: db)
        return days.sorted { ($0.key.current ? 1 : 0, $0.key.day) < ($1.key.current ? 1 : 0, $1.key.day) }.map {
            DayCounts(
                current: $0.key.current, day: formatDay(Timestamp(millisecondsSinceEpoch: $0.key.day).civil),
                counts: $0.value)
        }
    }

    /// The group of a row of counted events (alias k) by the money it carries: its currency
    /// (`XXX`: none named) and its purchase day, the day its amount converts at.
    static let moneyGroup = "COALESCE(k.currency, 'XXX') AS money_currency, DATE(k.period_at) AS money_day"

    /// What each classified event (alias k) adds to the counts, column by column: kept summed
    /// per 15-minute bucket by the refresh (`billing_counted_buckets`), summed from the rows at
    /// the edges. Cancellations, losses, refunds and revocations are every event of the class
    /// here; the window's rule takes the repeats back out (`dailyCounts`). The money: sales (a
    /// period start or one-time purchase reported first, not a trial, not family-shared,
    /// priced), their amount, and the refunded amount (a refund first of its period, not
    /// family-shared).
    static let eventSums: [(column: String, expression: String)] =
        [
            ("new_count", "k.first_ever AND k.kind = 'purchase'"),
            ("trials", "k.first_ever AND k.kind = 'purchase' AND k.is_trial"),
            ("family_shared", "k.first_ever AND k.family_shared AND k.kind IN ('purchase', 'non_renewing_purchase')"),
            ("converted", "k.converted"),
            ("renewals", "k.kind = 'renewal' AND k.period_first"),
            ("one_time", "k.kind = 'non_renewing_purchase' AND k.period_first"),
            ("billing_issues", "k.kind = 'billing_issue' AND k.period_first"),
            ("cancellations", "k.kind = 'cancellation'"),
            ("lost", "k.kind IN ('expiration', 'refund', 'revoke')"),
            ("refunds", "k.kind = 'refund'"),
            ("revocations", "k.kind = 'revoke'"),
        ] + moneyColumns

    /// The money columns of `eventSums` (the cohorts' revenue reads only these).
    static let moneyColumns: [(column: String, expression: String)] = [
        ("sales", sale),
        ("gross_milli", "IF(\(sale), k.price_milli, 0)"),
        (
            "refunded_milli",
            "IF(k.kind = 'refund' AND k.period_first AND NOT k.family_shared, ABS(CAST(COALESCE(k.price_milli, 0) AS DECIMAL(20, 0))), 0)"
        ),
    ]
    private static let sale = """
        (k.period_first AND NOT k.family_shared AND COALESCE(k.price_milli, 0) > 0 \
        AND (k.kind = 'non_renewing_purchase' OR (k.kind IN ('purchase', 'renewal') AND NOT k.is_trial)))
        """

    /// `SUM(expression) AS column, …` of `columns`.
    static func sums(_ columns: [(column: String, expression: String)]) -> String {
        columns.map { "SUM(\($0.expression)) AS \($0.column)" }.joined(separator: ", ")
    }

    /// The money of a group of counted events (`moneyColumns`; the DECIMAL sums may pass Int64's
    /// bounds, for rows written before ingestion refused such prices: read saturated, as
    /// `Money.add` adds).
    static let moneySums = sums(moneyColumns)

    /// Every day's (or cohort's) amounts into `currency`, with the rates of the currencies
    /// and purchase days they name (loaded once for all of them).
    static func convert<Key: Hashable>(_ days: inout [Key: Counts], to currency: String, on db: DatabaseConnection) throws {
        var wanted = CurrencyAmounts()
        for counts in days.values {
            wanted.add(counts.gross)
            wanted.add(counts.refunded)
        }
        let rates = try wanted.days.map { try ExchangeRates.load(currencies: wanted.currencies.union([currency]), days: $0, on: db) }
        for key in days.keys { days[key]!.convert(to: currency, with: rates ?? ExchangeRates()) }
    }

    struct DayKey: Hashable {
        var current: Bool
        var day: Int64
    }

    static func dayString(_ row: SQLRow, _ column: String) throws -> String {
        let civil = try row.timestamp(column).civil
        return formatDay(civil)
    }

    static func formatDay(_ c: CivilDateTime) -> String {
        func pad(_ n: Int, _ width: Int) -> String {
            let s = String(n)
            return String(repeating: "0", count: max(0, width - s.count)) + s
        }
        return "\(pad(c.year, 4))-\(pad(c.month, 2))-\(pad(c.day, 2))"
    }

    /// Every local day of [from, to) with its new and lost subscriptions (zeros included).
    static func dailySeries(_ q: Query, zone: String?, days: [DayCounts], on db: DatabaseConnection) throws -> [JSON] {
        let bounds = try db.queryOne(
            """
            SELECT \(localDay("CAST(\(q.from) AS DATETIME(3))", zone: zone)) AS first_day,
                   \(localDay("CAST(\(q.to.adding(milliseconds: -1)) AS DATETIME(3))", zone: zone)) AS last_day
            """)
        guard let bounds else { return [] }
        var day = try bounds.timestamp("first_day")
        let last = try bounds.timestamp("last_day")
        var byDay: [String: Counts] = [:]
        for d in days { byDay[d.day] = d.counts }
        var series: [JSON] = []
        while day <= last {
            let key = formatDay(day.civil)
            let c = byDay[key]
            series.append(["date": .string(key), "new": .int(c?.new ?? 0), "lost": .int(c?.lost ?? 0)])
            day = day.adding(seconds: 86_400)
        }
        return series
    }

}
