import Testing

@testable import Core

/// The conversion rule of docs/stats.md ("Currencies"): rates as exact decimals, the latest
/// rate on or before the purchase day, one rounding half away from zero. Expected values
/// are worked by hand (exact fractions, e.g. 1,200,000 ÷ 161.92 = 7411.067…).
@Suite struct ExchangeRatesTests {
    static func day(_ text: String) -> RateDay { RateDay(iso8601: text)! }
    static func rate(_ text: String) -> ExchangeRate { ExchangeRate(decimal: text)! }

    @Test func decimalsAsPublishedParseExactlyAndPrintBack() {
        #expect(ExchangeRate(decimal: "1.0856")?.scaled == 108_560_000)
        #expect(ExchangeRate(decimal: "161.92")?.scaled == 16_192_000_000)
        #expect(ExchangeRate(decimal: "0.85773")?.scaled == 85_773_000)
        #expect(ExchangeRate(decimal: "17487.21")?.scaled == 1_748_721_000_000)
        #expect(ExchangeRate(decimal: "1")?.scaled == 100_000_000)
        #expect(ExchangeRate(decimal: "0.00000001")?.scaled == 1)
        #expect(ExchangeRate(decimal: "9999999999.99999999")?.scaled == 999_999_999_999_999_999)
        #expect(ExchangeRate(decimal: "1.08560000")?.description == "1.0856")
        #expect(ExchangeRate(decimal: "25.025")?.description == "25.025")
        #expect(ExchangeRate(decimal: "7")?.description == "7")
        for bad in ["", "N/A", "0", "0.0", "-1.2", "+1.2", "1e-5", "1.", ".5", "1.123456789", "1,0856", " 1.08", "1.08 ", "12345678901", "1.2.3"] {
            #expect(ExchangeRate(decimal: bad) == nil, "\(bad)")
        }
    }

    @Test func daysAreRealCalendarDays() {
        #expect(Self.day("2026-03-02").description == "2026-03-02")
        #expect(RateDay(Timestamp(iso8601: "2026-03-02T23:59:59.999Z")!) == Self.day("2026-03-02"))
        #expect(RateDay(Timestamp(iso8601: "1969-12-31T12:00:00Z")!).daysSinceEpoch == -1)
        for bad in ["2026-02-30", "2026-3-02", "2026-03-02T00:00:00Z", "02 March 2026", ""] {
            #expect(RateDay(iso8601: bad) == nil, "\(bad)")
        }
    }

    @Test func roundingIsHalfAwayFromZeroOnce() {
        #expect(Money.dividedRounded(5, by: 2) == 3)
        #expect(Money.dividedRounded(-5, by: 2) == -3)
        #expect(Money.dividedRounded(7, by: 3) == 2)
        #expect(Money.dividedRounded(-7, by: 3) == -2)
        #expect(Money.dividedRounded(8, by: 3) == 3)
        #expect(Money.dividedRounded(Int128(Int64.max) * 3, by: 1) == .max)
        #expect(Money.dividedRounded(Int128(Int64.min) * 3, by: 1) == .min)
    }

    static let rates = ExchangeRates([
        "USD": [(day("2026-03-16"), rate("1.10")), (day("2026-02-27"), rate("1.08")), (day("2026-03-02"), rate("1.09"))],
        "JPY": [(day("2026-02-27"), rate("160")), (day("2026-03-02"), rate("161.92"))],
        "GBP": [(day("2026-03-02"), rate("0.85773"))],
    ])

    @Test func theLatestRateOnOrBeforeThePurchaseDayConverts() {
        let r = Self.rates
        // Into EUR: ÷ the currency's rate.
        #expect(r.convert(9_990, from: "USD", to: "EUR", on: Self.day("2026-03-01")) == 9_250)  // Sunday: Friday's 1.08
        #expect(r.convert(1_200_000, from: "JPY", to: "EUR", on: Self.day("2026-03-02")) == 7_411)
        #expect(r.convert(7_990, from: "GBP", to: "EUR", on: Self.day("2026-03-20")) == 9_315)
        #expect(r.convert(19_990, from: "USD", to: "EUR", on: Self.day("2026-03-16")) == 18_173)
        #expect(r.convert(-19_990, from: "USD", to: "EUR", on: Self.day("2026-03-16")) == -18_173)
        // Between two currencies: × the target's rate of the same day ÷ the source's.
        #expect(r.convert(1_200_000, from: "JPY", to: "USD", on: Self.day("2026-03-02")) == 8_078)
        #expect(r.convert(7_990, from: "GBP", to: "USD", on: Self.day("2026-03-20")) == 10_247)
        #expect(r.convert(4_990, from: "EUR", to: "USD", on: Self.day("2026-03-05")) == 5_439)
        // The same currency needs no rate; a day before the first rate, or a currency with
        // none, converts to nothing.
        #expect(r.convert(7_990, from: "GBP", to: "GBP", on: Self.day("1999-01-01")) == 7_990)
        #expect(r.convert(7_990, from: "GBP", to: "EUR", on: Self.day("2026-02-20")) == nil)
        #expect(r.convert(7_990, from: "EUR", to: "GBP", on: Self.day("2026-03-01")) == nil)
        #expect(r.convert(7_990, from: "CHF", to: "EUR", on: Self.day("2026-03-20")) == nil)
        #expect(r.rate("USD", on: Self.day("2026-03-15"))?.day == Self.day("2026-03-02"))
        #expect(r.rate("EUR", on: Self.day("1990-01-01"))?.rate == .euro)
    }

    @Test func sumsPerCurrencyAndDayConvertOnceAndWhatHasNoRateStaysApart() {
        var amounts = CurrencyAmounts()
        // Three sales of 3.33 USD on one day: converted as one sum, 9990 ÷ 1.08 = 9250
        // (each alone would be 3083.33… → 3083, three of them 9249).
        for _ in 0..<3 { amounts.add(3_330, currency: "USD", day: Self.day("2026-03-01")) }
        amounts.add(7_990, currency: "GBP", day: Self.day("2026-02-20"))
        amounts.add(500, currency: nil, day: Self.day("2026-03-01"))
        amounts.add(4_990, currency: "EUR", day: Self.day("2026-03-05"))
        let converted = amounts.converted(to: "EUR", with: Self.rates)
        #expect(converted.milli == 9_250 + 4_990)
        #expect(converted.unconverted == ["GBP": 7_990, "XXX": 500])
        #expect(amounts.currencies == ["USD", "GBP", "XXX", "EUR"])
        #expect(amounts.days == Self.day("2026-02-20")...Self.day("2026-03-05"))
    }

    @Test func monthlyRecurringRevenueIsAnExactFractionOfThePeriodPrice() {
        #expect(SubscriptionStats.monthly(55_546, .yearly) == 4_629)
        #expect(SubscriptionStats.monthly(2_990, .weekly) == 12_957)  // 2990 × 52 / 12 = 12956.67
        #expect(SubscriptionStats.monthly(9_990, .quarterly) == 3_330)
        #expect(SubscriptionStats.monthly(9_990, .lifetime) == 0)
    }
}
