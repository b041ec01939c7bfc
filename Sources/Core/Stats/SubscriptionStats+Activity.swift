extension SubscriptionStats {
    // MARK: - Active users, profile, funnel, recent events

    /// Users seen with a valid ID token on a UTC day of the period (billing_user_days).
    static func activeUsers(from: Timestamp, to: Timestamp, on db: DatabaseConnection) throws -> Int64 {
        let row = try db.queryOne(
            """
            SELECT COUNT(DISTINCT user_id) AS n FROM billing_user_days
            WHERE day >= DATE(\(from)) AND day <= DATE(\(to.adding(milliseconds: -1)))
            """)
        return try row?.int64("n") ?? 0
    }

    /// Subscriptions born in [from, to) whose owner is known: the median of whole days from
    /// the owner's sign-up to the subscription's first event (negative counts as 0). The new
    /// subscriptions are the classified purchases that are their subscription's first counted
    /// event; the refresh stored their days since sign-up (billing_counted_events, sql/026).
    /// MariaDB counts them per number of days (a few hundred groups, from the index of
    /// sql/027) and the median is taken here as `MEDIAN()` defines it (the middle
    /// value, or the mean of the two middle ones): a window function sorted every row
    /// (1.5 s for a year of a 10M-event inbox, docs/performance.md).
    static func subscriberProfile(_ q: Query, on db: DatabaseConnection) throws -> JSON {
        var histogram: [(days: Int64, count: Int64)] = []
        for row in try db.query(
            """
            SELECT k.signup_days AS days, COUNT(*) AS n
            FROM billing_counted_events k
            WHERE k.environment = \(q.environment.rawValue) AND k.first_ever = 1 AND k.kind = 'purchase'
              AND k.intrinsic_at >= \(q.from) AND k.intrinsic_at < \(q.to) AND k.signup_days IS NOT NULL
            GROUP BY k.signup_days ORDER BY k.signup_days
            """)
        {
            histogram.append((try row.int64("days"), try row.int64("n")))
        }
        let total = histogram.reduce(0) { $0 + $1.count }
        guard total > 0 else { return ["subscriptions": 0, "medianDaysToSubscribe": nil] }
        return ["subscriptions": .int(total), "medianDaysToSubscribe": .double(median(of: histogram, total: total))]
    }

    /// The median of the values `histogram` counts (ascending, `total` of them), rounded to
    /// one decimal.
    static func median(of histogram: [(days: Int64, count: Int64)], total: Int64) -> Double {
        func value(at position: Int64) -> Int64 {
            var seen: Int64 = 0
            for entry in histogram {
                seen += entry.count
                if position < seen { return entry.days }
            }
            return histogram.last?.days ?? 0
        }
        let middle = Double(value(at: (total - 1) / 2) + value(at: total / 2)) / 2
        return (middle * 10).rounded(.toNearestOrAwayFromZero) / 10
    }

    /// The paywall funnel per placement (`byStage: false`), or per placement, offering and
    /// ladder stage (`byStage: true`; events that named an offering): views, dismissals,
    /// purchase attempts, purchases (result done) and conversion = purchases / views; per
    /// stage also the App Store promotional offers the server signed there (`offersSigned`)
    /// and the users who redeemed one (`offersRedeemed`: an applied App Store purchase or
    /// renewal of that product in a promotional-offer period, begun at or after the
    /// signature, give or take the 10 minutes two clocks may disagree by).
    static func funnel(
        environment env: String, from: Timestamp, to: Timestamp, byStage: Bool = false,
        on db: DatabaseConnection
    ) throws -> [JSON] {
        guard from < to else { return [] }
        let keys = byStage ? "placement, offering, stage" : "placement"
        let rows = try db.query(
            """
            SELECT \(unsafeRaw: keys), SUM(type = 'view') AS views, SUM(type = 'dismiss') AS dismissals,
                   SUM(type = 'purchase') AS attempts, SUM(type = 'purchase' AND result = 'done') AS purchases,
                   SUM(type = 'offer_signed') AS signed,
                   COUNT(DISTINCT CASE WHEN type = 'offer_signed' AND EXISTS (
                       SELECT 1 FROM billing_events e
                       WHERE e.user_id = p.user_id AND e.product_id = p.product_id AND e.status = 'applied'
                         AND e.provider IN ('apple_notification', 'apple_transaction') AND e.period_type = 'promotional'
                         AND e.purchased_at >= p.received_at - INTERVAL 10 MINUTE) THEN p.user_id END) AS redeemed
            FROM billing_paywall_events p
            WHERE environment = \(env) AND received_at >= \(from) AND received_at < \(to)
              \(unsafeRaw: byStage ? "AND offering IS NOT NULL" : "")
            GROUP BY \(unsafeRaw: keys) ORDER BY \(unsafeRaw: keys)
            """)
        return try rows.map { row in
            let views = try row.int64("views")
            let purchases = try row.int64("purchases")
            var entry: JSONObject = [
                "placement": .string(try row.string("placement")), "views": .int(views),
                "dismissals": .int(try row.int64("dismissals")),
                "attempts": .int(try row.int64("attempts")), "purchases": .int(purchases),
                "conversionPct": .double(pct(purchases, views)),
            ]
            if byStage {
                entry["offering"] = .string(try row.string("offering"))
                entry["stage"] = try row.optionalInt64("stage").map(JSON.int) ?? .null
                entry["offersSigned"] = .int(try row.int64("signed"))
                entry["offersRedeemed"] = .int(try row.int64("redeemed"))
            }
            return .object(entry)
        }
    }

    static func recentEvents(environment env: String, on db: DatabaseConnection) throws -> [JSON] {
        let rows = try db.query(
            """
            SELECT e.id, e.provider, e.event_type, e.kind, e.status, e.user_id, e.subscription_id, e.product_id,
                   e.is_trial, e.price_milli, e.currency, e.intrinsic_at, e.expires_at
            FROM billing_events e
            WHERE e.environment = \(env) AND e.intrinsic_at IS NOT NULL
            ORDER BY e.intrinsic_at DESC, e.id DESC
            LIMIT 20
            """)
        return try rows.map { row in
            [
                "id": .int(Int64(try row.uint64("id"))),
                "provider": .string(try row.string("provider")),
                "type": .string(try row.string("event_type")),
                "kind": .string(try row.string("kind")),
                "status": .string(try row.string("status")),
                "userId": try row.optionalString("user_id").map(JSON.string) ?? .null,
                "subscriptionId": try row.optionalString("subscription_id").map(JSON.string) ?? .null,
                "productId": try row.optionalString("product_id").map(JSON.string) ?? .null,
                "isTrial": .bool(try row.bool("is_trial")),
                "priceMilli": try row.optionalInt64("price_milli").map(JSON.int) ?? .null,
                "currency": try row.optionalString("currency").map(JSON.string) ?? .null,
                "at": .string(try row.timestamp("intrinsic_at").iso8601),
                "expiresAt": try row.optionalTimestamp("expires_at").map { .string($0.iso8601) } ?? .null,
            ]
        }
    }

    /// nil for UTC; otherwise the zone as given once MariaDB knows it (named zones need its
    /// time zone tables, `+HH:MM` offsets never do).
    static func normalizedZone(_ zone: String?, on db: DatabaseConnection) throws -> String? {
        guard let zone, !zone.isEmpty, !["UTC", "Etc/UTC", "Z", "+00:00"].contains(zone) else { return nil }
        guard zone.utf8.count <= 64 else { throw QueryError.unknownTimeZone(zone) }
        let row = try db.queryOne("SELECT CONVERT_TZ('2000-01-01 00:00:00', '+00:00', \(zone)) AS probe")
        guard let row, try row.optionalTimestamp("probe") != nil else { throw QueryError.unknownTimeZone(zone) }
        return zone
    }
}
