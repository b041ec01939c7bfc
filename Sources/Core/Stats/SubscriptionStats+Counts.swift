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

    /// The counts of both periods by (period, local day), from one scan of their events
    /// ordered by subscription and time (a range of the `(environment, intrinsic_at)` index
    /// and one sort), folded here one subscription at a time, plus one look per subscription
    /// at its history before the scan (index-only, sql/005_stats.sql). The definitions are
    /// those of docs/stats.md, per event:
    /// - new: a purchase that is its subscription's first counted event ever (trials: of
    ///   those, the trial ones);
    /// - converted: the first report of a paid period (purchase/renewal, not a trial) whose
    ///   previous purchase/renewal was a trial;
    /// - renewals, gross revenue: the first report of a period (twins from both channels
    ///   share the subscription and the period key COALESCE(purchased_at, intrinsic_at));
    /// - cancellations, lost (expiration/refund/revoke), refunds, revocations: the first of
    ///   its class for the subscription within the same period ([from, to) or the previous);
    /// - refunded amount, billing issues: the first of its kind per period key.
    /// MariaDB's window functions computed the same (`StatsCountsRuleTests` keeps that query
    /// as the reference), but their running sums each passed over a temporary table that
    /// grows with the period: 8 s for a year of a 370k-event inbox, against 1.7 s for the
    /// whole report with this scan and fold (docs/stats.md, "Cost").
    static func dailyCounts(_ q: Query, previousFrom: Timestamp, zone: String?, on db: DatabaseConnection) throws -> [DayCounts] {
        let env = q.environment.rawValue
        let scanned: SQLQuery = """
            e.environment = \(env) AND e.intrinsic_at >= \(previousFrom) AND e.intrinsic_at < \(q.to) AND \(unsafeRaw: counted("e"))
            """
        // Before the scan: has the subscription a counted event, and was its latest
        // purchase/renewal a trial? (Everything later is in the scan.)
        var history: [String: (seenBefore: Bool, lastPeriodTrial: Bool)] = [:]
        try db.forEachRow(
            """
            SELECT s.subscription_id,
              EXISTS (SELECT 1 FROM billing_events p
                      WHERE p.environment = \(env) AND p.subscription_id = s.subscription_id
                        AND p.intrinsic_at < \(previousFrom) AND \(unsafeRaw: counted("p"))) AS seen_before,
              COALESCE((SELECT p.is_trial FROM billing_events p \(unsafeRaw: perSubscriptionIndex)
                        WHERE p.environment = \(env) AND p.subscription_id = s.subscription_id
                          AND p.intrinsic_at < \(previousFrom)
                          AND p.status IN ('applied', 'unmatched') AND \(unsafeRaw: countedKind("p")) IN ('purchase', 'renewal')
                        ORDER BY p.intrinsic_at DESC, p.id DESC LIMIT 1), 0) AS last_period_trial
            FROM (SELECT DISTINCT e.subscription_id FROM billing_events e WHERE \(scanned)) s
            """
        ) { (row: SQLRow) throws(DatabaseError) in
            let seen = try row.bool("seen_before")
            let trial = try row.bool("last_period_trial")
            if seen || trial { history[try row.string("subscription_id")] = (seen, trial) }
        }

        var days: [DayKey: Counts] = [:]
        var subscription: String?
        var fold = SubscriptionFold(seenBefore: false, lastPeriodTrial: false)
        try db.forEachRow(
            """
            SELECT e.subscription_id, \(unsafeRaw: countedKind("e")) AS kind, e.is_trial, e.price_milli, e.currency, e.family_shared,
              e.intrinsic_at >= \(q.from) AS cur, COALESCE(e.purchased_at, e.intrinsic_at) AS period_key,
              \(localDay("e.intrinsic_at", zone: zone)) AS day
            FROM billing_events e
            WHERE \(scanned)
            ORDER BY e.subscription_id, e.intrinsic_at, e.id
            """
        ) { (row: SQLRow) throws(DatabaseError) in
            let key = try row.string("subscription_id")
            if key != subscription {
                subscription = key
                let before = history[key]
                fold = SubscriptionFold(seenBefore: before?.seenBefore ?? false, lastPeriodTrial: before?.lastPeriodTrial ?? false)
            }
            let periodKey = try row.timestamp("period_key")
            let event = FoldedEvent(
                kind: try row.string("kind"), isTrial: try row.bool("is_trial"),
                priceMilli: try row.optionalInt64("price_milli"),
                currency: try row.optionalString("currency"), isSale: !(try row.bool("family_shared")),
                current: try row.bool("cur"),
                periodKey: periodKey.millisecondsSinceEpoch, purchaseDay: RateDay(periodKey))
            let day = DayKey(current: event.current, day: try row.timestamp("day").millisecondsSinceEpoch)
            fold.fold(event, into: &days[day, default: Counts()])
        }
        // New family-shared subscriptions: the first counted event of each falls in the period.
        try db.forEachRow(
            """
            SELECT e.intrinsic_at >= \(q.from) AS cur, \(localDay("e.intrinsic_at", zone: zone)) AS day, COUNT(*) AS n
            FROM billing_events e
            WHERE e.environment = \(env) AND e.intrinsic_at >= \(previousFrom) AND e.intrinsic_at < \(q.to)
              AND \(unsafeRaw: counted("e")) AND e.family_shared = 1 AND e.kind IN ('purchase', 'non_renewing_purchase')
              AND NOT EXISTS (SELECT 1 FROM billing_events p
                              WHERE p.environment = e.environment AND p.subscription_id = e.subscription_id
                                AND \(unsafeRaw: counted("p"))
                                AND (p.intrinsic_at < e.intrinsic_at OR (p.intrinsic_at = e.intrinsic_at AND p.id < e.id)))
            GROUP BY cur, day
            """
        ) { (row: SQLRow) throws(DatabaseError) in
            let day = DayKey(current: try row.bool("cur"), day: try row.timestamp("day").millisecondsSinceEpoch)
            days[day, default: Counts()].familyShared += try row.int64("n")
        }
        try convert(&days, to: q.currency, on: db)
        return days.sorted { ($0.key.current ? 1 : 0, $0.key.day) < ($1.key.current ? 1 : 0, $1.key.day) }.map {
            DayCounts(
                current: $0.key.current, day: formatDay(Timestamp(millisecondsSinceEpoch: $0.key.day).civil),
                counts: $0.value)
        }
    }

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

    /// One scanned event, as the counts need it.
    struct FoldedEvent {
        var kind: String
        var isTrial: Bool
        var priceMilli: Int64?
        var currency: String?
        /// Money that counts: not a family-shared purchase (SPEC §15: access, but no revenue).
        var isSale: Bool
        /// In [from, to), not in the previous period.
        var current: Bool
        var periodKey: Int64
        /// The UTC day of the period key: the day whose rate converts its amount.
        var purchaseDay: RateDay

        var sale: Int64? {
            guard isSale, let price = priceMilli, price > 0 else { return nil }
            return price
        }
    }

    /// What the counts remember of one subscription while its events pass in time order
    /// (a few counters, and three per period key it reported).
    struct SubscriptionFold {
        /// A counted event before the scan (its first purchase in the scan is then not new).
        var seenBefore: Bool
        /// Whether the latest purchase/renewal so far was a trial.
        var lastPeriodTrial: Bool
        var scanned = 0
        /// Cancellations, losses, refunds, revocations so far, per period (previous, current).
        var classes = [ClassCounts(), ClassCounts()]
        /// Reports so far of each period key: purchases/renewals, refunds, billing issues.
        var periods: [Int64: (starts: Int, refunds: Int, billingIssues: Int)] = [:]

        struct ClassCounts {
            var cancellations = 0, lost = 0, refunds = 0, revocations = 0
        }

        mutating func fold(_ e: FoldedEvent, into c: inout Counts) {
            scanned += 1
            let periodStart = e.kind == "purchase" || e.kind == "renewal"
            if e.kind == "purchase" && scanned == 1 && !seenBefore {
                c.new += 1
                if e.isTrial { c.trials += 1 }
            }
            if e.kind == "non_renewing_purchase" {
                // A one-time purchase (SPEC §15): a sale of its own, no period of a subscription.
                periods[e.periodKey, default: (0, 0, 0)].starts += 1
                if periods[e.periodKey]!.starts == 1 {
                    c.oneTimePurchases += 1
                    if let price = e.sale {
                        c.gross.add(price, currency: e.currency, day: e.purchaseDay)
                        c.sales += 1
                    }
                }
            }
            if periodStart {
                periods[e.periodKey, default: (0, 0, 0)].starts += 1
                let firstReport = periods[e.periodKey]!.starts == 1
                if firstReport && !e.isTrial {
                    if lastPeriodTrial { c.converted += 1 }
                    if let price = e.sale {
                        c.gross.add(price, currency: e.currency, day: e.purchaseDay)
                        c.sales += 1
                    }
                }
                if firstReport && e.kind == "renewal" { c.renewals += 1 }
                lastPeriodTrial = e.isTrial
            }
            let p = e.current ? 1 : 0
            switch e.kind {
            case "cancellation":
                classes[p].cancellations += 1
                if classes[p].cancellations == 1 { c.cancellations += 1 }
            case "expiration", "refund", "revoke":
                classes[p].lost += 1
                if classes[p].lost == 1 { c.lost += 1 }
            default:
                break
            }
            if e.kind == "refund" {
                classes[p].refunds += 1
                if classes[p].refunds == 1 { c.refunds += 1 }
                periods[e.periodKey, default: (0, 0, 0)].refunds += 1
                if periods[e.periodKey]!.refunds == 1 && e.isSale, let price = e.priceMilli, price != 0 {
                    c.refunded.add(Money.magnitude(price), currency: e.currency, day: e.purchaseDay)
                }
            }
            if e.kind == "revoke" {
                classes[p].revocations += 1
                if classes[p].revocations == 1 { c.revocations += 1 }
            }
            if e.kind == "billing_issue" {
                periods[e.periodKey, default: (0, 0, 0)].billingIssues += 1
                if periods[e.periodKey]!.billingIssues == 1 { c.billingIssues += 1 }
            }
        }
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
