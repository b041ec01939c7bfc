/// Exchange rates as data (SPEC §20, docs/stats.md "Currencies"): how many units of a
/// currency one euro buys on a day, as the European Central Bank publishes its reference
/// rates, imported with `rates.import` into `billing_exchange_rates` (sql/021). Revenue and
/// MRR convert each amount at the rate of its own purchase day, the latest rate on or
/// before it; what has no rate stays in its currency, reported apart.
///
/// Exact: a rate is an integer number of 10⁻⁸ units (the table's DECIMAL(20,8)), amounts
/// are integer milli-units, and the product and quotient are taken in 128 bits. The one
/// rounding is `Money.dividedRounded`, half away from zero, of each converted sum.
struct ExchangeRate: Sendable, Hashable, Comparable, CustomStringConvertible {
    /// Units of the currency per euro, times `scale`.
    var scaled: Int64

    static let scale: Int64 = 100_000_000
    static let euro = ExchangeRate(scaled: scale)
    /// Decimals kept (the column's scale): ECB publishes at most five.
    static let decimals = 8

    init(scaled: Int64) { self.scaled = scaled }

    /// A plain positive decimal as published (`1.0856`, `161.92`, `0.85773`): 1–10 integer
    /// digits (the largest ECB rate ever, the old Turkish lira's, had 7) and at most 8
    /// decimals; nil for anything else (signs, exponents, zero, `N/A`).
    init?(decimal text: String) {
        let parts = text.utf8.split(separator: UInt8(ascii: "."), maxSplits: 1, omittingEmptySubsequences: false)
        guard let whole = parts.first, (1...10).contains(whole.count) else { return nil }
        let fraction = parts.count == 2 ? Array(parts[1]) : []
        guard parts.count == 1 || (1...Self.decimals).contains(fraction.count) else { return nil }
        var value: Int64 = 0
        for byte in whole {
            guard (48...57).contains(byte) else { return nil }
            value = value * 10 + Int64(byte - 48)
        }
        var digits = 0
        for byte in fraction {
            guard (48...57).contains(byte) else { return nil }
            value = value * 10 + Int64(byte - 48)
            digits += 1
        }
        for _ in digits..<Self.decimals { value *= 10 }
        guard value > 0 else { return nil }
        scaled = value
    }

    /// The decimal with its trailing zeros dropped (`1.0856`), as the import gave it.
    var description: String {
        let whole = scaled / Self.scale
        var fraction = String(scaled % Self.scale)
        fraction = String(repeating: "0", count: Self.decimals - fraction.count) + fraction
        while fraction.hasSuffix("0") { fraction.removeLast() }
        return fraction.isEmpty ? String(whole) : "\(whole).\(fraction)"
    }

    static func < (a: ExchangeRate, b: ExchangeRate) -> Bool { a.scaled < b.scaled }
}

/// A UTC calendar day as days since 1970-01-01: the day of a rate, and the purchase day
/// an amount converts at.
struct RateDay: Sendable, Hashable, Comparable, CustomStringConvertible {
    var daysSinceEpoch: Int64

    init(daysSinceEpoch: Int64) { self.daysSinceEpoch = daysSinceEpoch }

    /// The UTC day of an instant.
    init(_ t: Timestamp) {
        let ms = t.millisecondsSinceEpoch
        daysSinceEpoch = ms >= 0 ? ms / 86_400_000 : (ms - 86_399_999) / 86_400_000
    }

    /// `YYYY-MM-DD`, a real day; nil otherwise.
    init?(iso8601 text: String) {
        guard text.utf8.count == 10, let t = Timestamp(iso8601: text) else { return nil }
        self.init(t)
    }

    var timestamp: Timestamp { Timestamp(millisecondsSinceEpoch: daysSinceEpoch * 86_400_000) }
    var description: String { SubscriptionStats.formatDay(timestamp.civil) }

    static func < (a: RateDay, b: RateDay) -> Bool { a.daysSinceEpoch < b.daysSinceEpoch }
}

/// The rates a report needs, by currency and day, and the conversion rule.
struct ExchangeRates: Sendable {
    /// Per currency, its rates by ascending day.
    private var byCurrency: [String: [(day: RateDay, rate: ExchangeRate)]]

    init(_ rates: [String: [(day: RateDay, rate: ExchangeRate)]] = [:]) {
        byCurrency = rates.mapValues { $0.sorted { $0.day < $1.day } }
    }

    /// The latest rate of `currency` on or before `day`; the euro's is 1, always.
    func rate(_ currency: String, on day: RateDay) -> (day: RateDay, rate: ExchangeRate)? {
        if currency == "EUR" { return (day, .euro) }
        guard let rates = byCurrency[currency] else { return nil }
        // The last entry whose day is <= day.
        let after = rates.partitioningIndex { $0.day > day }
        return after == 0 ? nil : rates[after - 1]
    }

    /// `milli` units of `currency` bought on `day`, in milli-units of `target`: × target's
    /// rate ÷ currency's rate of that day (each the latest on or before it), rounded half
    /// away from zero. The same currency converts to itself without a rate; nil when a rate
    /// is missing.
    func convert(_ milli: Int64, from currency: String, to target: String, on day: RateDay) -> Int64? {
        if currency == target { return milli }
        guard let source = rate(currency, on: day), let wanted = rate(target, on: day) else { return nil }
        return Money.dividedRounded(Int128(milli) * Int128(wanted.rate.scaled), by: Int128(source.rate.scaled))
    }

    /// `convert`, times `scale` and without rounding yet: `milli × numerator ÷ denominator`
    /// (e.g. a monthly factor) in units of 1/`scale` milli, rounded once, half away from
    /// zero; nil when a rate is missing. For sums of many small terms (MRR movements) that
    /// are rounded once at the end.
    func convertScaled(
        _ milli: Int64, from currency: String, to target: String, on day: RateDay,
        times factor: (numerator: Int64, denominator: Int64), scale: Int64
    ) -> Int128? {
        var numerator = Money.product(Int128(milli), Int128(factor.numerator) * Int128(scale))
        var denominator = Int128(factor.denominator)
        if currency != target {
            guard let source = rate(currency, on: day), let wanted = rate(target, on: day) else { return nil }
            numerator = Money.product(numerator, Int128(wanted.rate.scaled))
            denominator *= Int128(source.rate.scaled)
        }
        return Money.roundedQuotient(numerator, denominator)
    }

    /// The rates of `currencies` that days in `days` can need: each currency's latest rate on
    /// or before the first day, and every later one up to the last (two index ranges of
    /// the primary key per currency).
    static func load(
        currencies: Set<String>, days: ClosedRange<RateDay>, on db: DatabaseConnection
    ) throws -> ExchangeRates {
        let wanted = currencies.filter { $0 != "EUR" }.sorted()
        guard !wanted.isEmpty else { return ExchangeRates() }
        var rates: [String: [(day: RateDay, rate: ExchangeRate)]] = [:]
        for currency in wanted {
            try db.forEachRow(
                """
                SELECT r.rate_date, r.per_eur FROM billing_exchange_rates r
                WHERE r.currency = \(currency) AND r.rate_date <= \(days.upperBound.timestamp)
                  AND r.rate_date >= COALESCE((SELECT MAX(f.rate_date) FROM billing_exchange_rates f
                                               WHERE f.currency = \(currency) AND f.rate_date <= \(days.lowerBound.timestamp)),
                                              \(days.lowerBound.timestamp))
                ORDER BY r.rate_date
                """
            ) { (row: SQLRow) throws(DatabaseError) in
                guard let rate = ExchangeRate(decimal: try row.string("per_eur")) else {
                    throw DatabaseError(kind: .invalidData, detail: "billing_exchange_rates.per_eur is not a positive decimal")
                }
                rates[currency, default: []].append((RateDay(try row.timestamp("rate_date")), rate))
            }
        }
        return ExchangeRates(rates)
    }
}

/// Amounts in their own currencies, summed exactly per currency and purchase day until a
/// report converts them: each such sum is converted once, then the converted sums add.
struct CurrencyAmounts: Sendable, Equatable {
    struct Key: Hashable, Sendable {
        /// ISO 4217; `XXX` (ISO's "no currency") for a price that named none.
        var currency: String
        var day: RateDay
    }

    private(set) var sums: [Key: Int64] = [:]

    init() {}

    var isEmpty: Bool { sums.isEmpty }

    mutating func add(_ milli: Int64, currency: String?, day: RateDay) {
        let key = Key(currency: currency ?? "XXX", day: day)
        sums[key] = Money.add(sums[key] ?? 0, milli)
    }

    mutating func add(_ other: CurrencyAmounts) {
        for (key, milli) in other.sums { sums[key] = Money.add(sums[key] ?? 0, milli) }
    }

    var currencies: Set<String> { Set(sums.keys.map(\.currency)) }

    /// The first and last purchase day, nil when empty.
    var days: ClosedRange<RateDay>? {
        guard let first = sums.keys.map(\.day).min(), let last = sums.keys.map(\.day).max() else { return nil }
        return first...last
    }

    /// The amounts of one currency.
    func only(_ currency: String) -> CurrencyAmounts {
        var part = CurrencyAmounts()
        part.sums = sums.filter { $0.key.currency == currency }
        return part
    }

    /// The sum of every amount, in whatever currency (meaningful for one currency).
    var total: Int64 { sums.values.reduce(0, Money.add) }

    /// The converted total in `target` and, per currency, what had no rate (in its own
    /// currency, unconverted).
    func converted(to target: String, with rates: ExchangeRates) -> (milli: Int64, unconverted: [String: Int64]) {
        var total: Int64 = 0
        var unconverted: [String: Int64] = [:]
        for (key, milli) in sums {
            if key.currency != "XXX", let value = rates.convert(milli, from: key.currency, to: target, on: key.day) {
                total = Money.add(total, value)
            } else {
                unconverted[key.currency] = Money.add(unconverted[key.currency] ?? 0, milli)
            }
        }
        return (total, unconverted)
    }
}
