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

    /// The counts of both periods by (period, local day): one range of `billing_counted_events`
    /// (sql/026; the refresh classified each event when it folded its subscription) summed by
    /// MariaDB per period, local day, currency and purchase day. The definitions are those of
    /// docs/stats.md, per event:
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
        // The start of the event's period: its class's previous event counts when not before it.
        let windowStart: SQLQuery = "IF(k.intrinsic_at >= \(q.from), CAST(\(q.from) AS DATETIME(3)), CAST(\(previousFrom) AS DATETIME(3)))"
        func first(_ previous: String) -> SQLQuery { "(k.\(unsafeRaw: previous) IS NULL OR k.\(unsafeRaw: previous) < \(windowStart))" }
        var days: [DayKey: Counts] = [:]
        try db.forEachRow(
            """
            SELECT k.intrinsic_at >= \(q.from) AS cur, \(localDay("k.intrinsic_at", zone: zone)) AS day,
              \(unsafeRaw: moneyGroup),
              SUM(k.first_ever AND k.kind = 'purchase') AS new_count,
              SUM(k.first_ever AND k.kind = 'purchase' AND k.is_trial) AS trials,
              SUM(k.first_ever AND k.family_shared AND k.kind IN ('purchase', 'non_renewing_purchase')) AS family_shared,
              SUM(k.converted) AS converted,
              SUM(k.kind = 'renewal' AND k.period_first) AS renewals,
              SUM(k.kind = 'non_renewing_purchase' AND k.period_first) AS one_time,
              SUM(k.kind = 'billing_issue' AND k.period_first) AS billing_issues,
              SUM(k.kind = 'cancellation' AND \(first("previous_class_at"))) AS cancellations,
              SUM(k.kind IN ('expiration', 'refund', 'revoke') AND \(first("previous_class_at"))) AS lost,
              SUM(k.kind = 'refund' AND \(first("previous_kind_at"))) AS refunds,
              SUM(k.kind = 'revoke' AND \(first("previous_kind_at"))) AS revocations,
              \(unsafeRaw: moneySums)
            FROM billing_counted_events k
            WHERE k.environment = \(q.environment.rawValue) AND k.intrinsic_at >= \(previousFrom) AND k.intrinsic_at < \(q.to)
            GROUP BY cur, day, money_currency, money_day
            """
        ) { (row: SQLRow) throws(DatabaseError) in
            let key = DayKey(current: try row.bool("cur"), day: try row.timestamp("day").millisecondsSinceEpoch)
            var c = days[key] ?? Counts()
            c.new += try row.int64("new_count")
            c.trials += try row.int64("trials")
            c.familyShared += try row.int64("family_shared")
            c.converted += try row.int64("converted")
            c.renewals += try row.int64("renewals")
            c.oneTimePurchases += try row.int64("one_time")
            c.billingIssues += try row.int64("billing_issues")
            c.cancellations += try row.int64("cancellations")
            c.lost += try row.int64("lost")
            c.refunds += try row.int64("refunds")
            c.revocations += try row.int64("revocations")
            try c.addMoney(row)
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

    /// The money of a group of counted events (alias k): sales (a period start or one-time
    /// purchase reported first, not a trial, not family-shared, priced), their amount, and the
    /// refunded amount (a refund first of its period, not family-shared). The sums are DECIMAL
    /// and may pass Int64's bounds (rows written before ingestion refused such prices): read
    /// saturated, as `Money.add` adds.
    static let moneySums = """
        SUM(\(sale)) AS sales, SUM(IF(\(sale), k.price_milli, 0)) AS gross_milli,
        SUM(IF(k.kind = 'refund' AND k.period_first AND NOT k.family_shared, ABS(CAST(COALESCE(k.price_milli, 0) AS DECIMAL(20, 0))), 0)) AS refunded_milli
        """
    private static let sale = """
        (k.period_first AND NOT k.family_shared AND COALESCE(k.price_milli, 0) > 0 \
        AND (k.kind = 'non_renewing_purchase' OR (k.kind IN ('purchase', 'renewal') AND NOT k.is_trial)))
        """

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
