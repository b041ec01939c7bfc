extension ExchangeRates {
    /// One rate of `rates.import`.
    struct Entry: Sendable, Equatable {
        var currency: String
        var day: RateDay
        var rate: ExchangeRate

        init(currency: String, day: RateDay, rate: ExchangeRate) {
            self.currency = currency
            self.day = day
            self.rate = rate
        }
    }

    struct ImportResult: Sendable, Equatable {
        var inserted = 0
        var updated = 0
        var unchanged = 0
    }

    /// Rows per INSERT statement.
    static let chunkSize = 1000

    /// `rates.import`: stores `entries` (a new (currency, day) is inserted, a changed value
    /// replaces the old one with its source, the same value is left as it was: re-importing
    /// a file is idempotent) and audits the call, in one transaction. Reports written while
    /// it runs see the rates before or after it, never half of them.
    static func importRates(
        _ entries: [Entry], source: String, actor: String, now: Timestamp,
        on db: DatabaseConnection
    ) throws -> ImportResult {
        try db.transaction(retries: 3, isolation: .readCommitted) { db -> ImportResult in
            var result = ImportResult()
            for chunk in entries.chunks(of: chunkSize) {
                // Which keys exist already: the rest are inserts; of the existing, the ones
                // whose value differs count twice in the affected rows (MariaDB's rule for
                // ON DUPLICATE KEY UPDATE), the unchanged ones not at all.
                var keys: SQLQuery = ""
                for (index, e) in chunk.enumerated() {
                    keys.append(index == 0 ? "(\(e.currency), \(e.day.timestamp))" : ", (\(e.currency), \(e.day.timestamp))")
                }
                let existing = try db.queryOne(
                    "SELECT COUNT(*) AS n FROM billing_exchange_rates WHERE (currency, rate_date) IN (\(keys)) FOR UPDATE")
                let known = Int(try existing?.int64("n") ?? 0)
                var insert: SQLQuery = "INSERT INTO billing_exchange_rates (currency, rate_date, per_eur, source, imported_at) VALUES "
                for (index, e) in chunk.enumerated() {
                    let values: SQLQuery = "(\(e.currency), \(e.day.timestamp), \(e.rate.description), \(source), \(now))"
                    if index > 0 { insert.append(", ") }
                    insert.append(values)
                }
                // per_eur last: MariaDB assigns left to right, so the tests above see the old value.
                insert.append(
                    """
                     ON DUPLICATE KEY UPDATE source = IF(per_eur = VALUES(per_eur), source, VALUES(source)),
                      imported_at = IF(per_eur = VALUES(per_eur), imported_at, VALUES(imported_at)),
                      per_eur = VALUES(per_eur)
                    """)
                let affected = try db.execute(insert).affectedRows
                let inserted = chunk.count - known
                let updated = (affected - inserted) / 2
                result.inserted += inserted
                result.updated += updated
                result.unchanged += known - updated
            }
            let days = entries.map(\.day)
            try AuditLog.write(
                actor: actor, action: "rates.import",
                detail: [
                    "source": .string(source), "received": .int(Int64(entries.count)),
                    "inserted": .int(Int64(result.inserted)), "updated": .int(Int64(result.updated)),
                    "unchanged": .int(Int64(result.unchanged)),
                    "from": days.min().map { .string($0.description) } ?? .null,
                    "to": days.max().map { .string($0.description) } ?? .null,
                    "currencies": .int(Int64(Set(entries.map(\.currency)).count)),
                ],
                now: now, on: db)
            return result
        }
    }

    /// `rates.list`: per currency, the days it has rates for and its latest rate; with a
    /// `currency`, its rates in [from, to] latest first, at most `limit`.
    static func list(
        currency: String?, from: RateDay?, to: RateDay?, limit: Int, on db: DatabaseConnection
    ) throws -> JSON {
        var currencies: [JSON] = []
        for row in try db.query(
            """
            SELECT r.currency, MIN(r.rate_date) AS first_day, MAX(r.rate_date) AS last_day, COUNT(*) AS days,
              (SELECT l.per_eur FROM billing_exchange_rates l WHERE l.currency = r.currency
               ORDER BY l.rate_date DESC LIMIT 1) AS latest
            FROM billing_exchange_rates r GROUP BY r.currency ORDER BY r.currency
            """)
        {
            currencies.append(
                [
                    "currency": .string(try row.string("currency")),
                    "from": .string(RateDay(try row.timestamp("first_day")).description),
                    "to": .string(RateDay(try row.timestamp("last_day")).description),
                    "days": .int(try row.int64("days")),
                    "latestPerEUR": .string(ExchangeRate(decimal: try row.string("latest"))?.description ?? "?"),
                ])
        }
        var result: JSONObject = ["base": "EUR", "currencies": .array(currencies)]
        if let currency {
            let lower = from ?? RateDay(daysSinceEpoch: 0)
            let upper = to ?? RateDay(daysSinceEpoch: 2_932_896)  // 9999-12-31
            let rows = try db.query(
                """
                SELECT rate_date, per_eur, source, imported_at FROM billing_exchange_rates
                WHERE currency = \(currency) AND rate_date >= \(lower.timestamp) AND rate_date <= \(upper.timestamp)
                ORDER BY rate_date DESC LIMIT \(Int64(limit))
                """)
            result["currency"] = .string(currency)
            result["rates"] = .array(
                try rows.map { row in
                    [
                        "date": .string(RateDay(try row.timestamp("rate_date")).description),
                        "perEUR": .string(ExchangeRate(decimal: try row.string("per_eur"))?.description ?? "?"),
                        "source": .string(try row.string("source")),
                        "importedAt": .string(try row.timestamp("imported_at").iso8601),
                    ]
                })
        }
        return .object(result)
    }
}
