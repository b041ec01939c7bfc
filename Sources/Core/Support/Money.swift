/// Arithmetic on milli-unit amounts (SPEC §9) that never traps (SPEC §19): a webhook may state
/// any price, and a statistic over hostile or corrupted rows answers, it does not crash
/// billing-rpc. Ingestion refuses a price outside `storable` (400); totals saturate at
/// Int64's bounds (far beyond any real revenue: 9.2 × 10^15 currency units).
enum Money {
    /// Prices the routes store: |milli| < 10^15 (a trillion currency units).
    static let storable: ClosedRange<Int64> = -999_999_999_999_999...999_999_999_999_999

    /// a + b, saturating at Int64's bounds.
    static func add(_ a: Int64, _ b: Int64) -> Int64 {
        let (sum, overflow) = a.addingReportingOverflow(b)
        return overflow ? (b > 0 ? .max : .min) : sum
    }

    /// a − b, saturating at Int64's bounds.
    static func subtract(_ a: Int64, _ b: Int64) -> Int64 {
        let (difference, overflow) = a.subtractingReportingOverflow(b)
        return overflow ? (b < 0 ? .max : .min) : difference
    }

    /// |a| (Int64.min's is Int64.max).
    static func magnitude(_ a: Int64) -> Int64 { a == .min ? .max : Swift.abs(a) }

}

extension Money {
    /// `numerator / denominator` rounded half away from zero, clamped to Int64's bounds: the
    /// one rounding of a converted amount (`ExchangeRates`) and of a monthly recurring amount
    /// (`SubscriptionStats.monthlyFactor`). `denominator` must be positive.
    static func dividedRounded(_ numerator: Int128, by denominator: Int128) -> Int64 {
        let rounded = roundedQuotient(numerator, denominator)
        if rounded > Int128(Int64.max) { return .max }
        if rounded < Int128(Int64.min) { return .min }
        return Int64(rounded)
    }

    /// `numerator / denominator` rounded half away from zero, in 128 bits.
    static func roundedQuotient(_ numerator: Int128, _ denominator: Int128) -> Int128 {
        precondition(denominator > 0, "a positive denominator")
        let (quotient, remainder) = numerator.quotientAndRemainder(dividingBy: denominator)
        guard remainder.magnitude * 2 >= denominator.magnitude else { return quotient }
        return numerator < 0 ? quotient - 1 : quotient + 1
    }

    /// a × b in 128 bits, saturating at its bounds (amounts past 10^38 are no revenue).
    static func product(_ a: Int128, _ b: Int128) -> Int128 {
        let (value, overflow) = a.multipliedReportingOverflow(by: b)
        return overflow ? ((a < 0) != (b < 0) ? .min : .max) : value
    }
}
