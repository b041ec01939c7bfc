/// How long a non-renewing product grants its tier (`products.<id>.duration`): an ISO-8601
/// duration of whole years, months, weeks and days (`P1M`, `P1Y`, `P2W`, `P1Y6M`, `P30D`).
/// Months and years move the calendar date, clamped to the month's last day (January 31 +
/// P1M = February 28 or 29), as the stores count a month; the time of day stays.
struct CatalogDuration: Sendable, Equatable, CustomStringConvertible {
    var years = 0, months = 0, days = 0

    init(years: Int, months: Int, days: Int) {
        self.years = years
        self.months = months
        self.days = days
    }

    /// nil unless `text` is `P` followed by at least one `<digits><Y|M|W|D>`, each unit at
    /// most once and in that order, with no time part and nothing else.
    init?(_ text: String) {
        let bytes = Array(text.utf8)
        guard bytes.count >= 3, bytes.count <= 32, bytes[0] == UInt8(ascii: "P") else { return nil }
        var index = 1
        var order = 0
        var weeks = 0
        while index < bytes.count {
            var value = 0
            var digits = 0
            while index < bytes.count, bytes[index] >= 48, bytes[index] <= 57 {
                value = value * 10 + Int(bytes[index] - 48)
                digits += 1
                index += 1
            }
            guard digits > 0, digits <= 5, index < bytes.count else { return nil }
            let units: [UInt8] = [UInt8(ascii: "Y"), UInt8(ascii: "M"), UInt8(ascii: "W"), UInt8(ascii: "D")]
            guard let unit = units.firstIndex(of: bytes[index]), unit >= order else { return nil }
            switch unit {
            case 0: years = value
            case 1: months = value
            case 2: weeks = value
            default: days = value
            }
            order = unit + 1
            index += 1
        }
        days += weeks * 7
        guard years + months + days > 0 else { return nil }
    }

    /// `start` moved by this duration.
    func after(_ start: Timestamp) -> Timestamp {
        var c = start.civil
        let totalMonths = c.year * 12 + (c.month - 1) + years * 12 + months
        c.year = totalMonths / 12
        c.month = totalMonths % 12 + 1
        c.day = min(c.day, Self.daysIn(month: c.month, year: c.year))
        return Timestamp(c).adding(seconds: Int64(days) * 86_400)
    }

    static func daysIn(month: Int, year: Int) -> Int {
        switch month {
        case 2: return year % 4 == 0 && (year % 100 != 0 || year % 400 == 0) ? 29 : 28
        case 4, 6, 9, 11: return 30
        default: return 31
        }
    }

    var description: String {
        var text = "P"
        if years > 0 { text += "\(years)Y" }
        if months > 0 { text += "\(months)M" }
        if days > 0 { text += "\(days)D" }
        return text
    }
}
