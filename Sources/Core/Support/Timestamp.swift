import Glibc

/// A point in time as milliseconds since the Unix epoch, UTC. The database stores
/// DATETIME(3) UTC, providers send milliseconds, and the API prints ISO-8601 with
/// milliseconds: one integer type keeps all three exact.
struct Timestamp: Sendable, Hashable, Comparable, CustomStringConvertible {
    var millisecondsSinceEpoch: Int64

    init(millisecondsSinceEpoch: Int64) { self.millisecondsSinceEpoch = millisecondsSinceEpoch }
    init(secondsSinceEpoch: Int64) { self.millisecondsSinceEpoch = secondsSinceEpoch * 1000 }

    static func < (lhs: Timestamp, rhs: Timestamp) -> Bool {
        lhs.millisecondsSinceEpoch < rhs.millisecondsSinceEpoch
    }

    func adding(milliseconds: Int64) -> Timestamp {
        Timestamp(millisecondsSinceEpoch: millisecondsSinceEpoch + milliseconds)
    }

    func adding(seconds: Int64) -> Timestamp { adding(milliseconds: seconds * 1000) }

    /// Whole seconds since the epoch, rounded down (also before 1970): a JWT NumericDate.
    var secondsSinceEpoch: Int64 {
        let (quotient, remainder) = millisecondsSinceEpoch.quotientAndRemainder(dividingBy: 1000)
        return remainder < 0 ? quotient - 1 : quotient
    }

    /// `2026-11-29T12:25:44.123Z`
    var description: String { iso8601 }
}

/// A calendar date-time in UTC, the shape MariaDB's MYSQL_TIME and ISO-8601 both use.
struct CivilDateTime: Sendable, Equatable {
    var year: Int, month: Int, day: Int
    var hour: Int, minute: Int, second: Int, millisecond: Int

    init(year: Int, month: Int, day: Int, hour: Int = 0, minute: Int = 0, second: Int = 0, millisecond: Int = 0) {
        self.year = year
        self.month = month
        self.day = day
        self.hour = hour
        self.minute = minute
        self.second = second
        self.millisecond = millisecond
    }
}

extension Timestamp {
    /// Howard Hinnant's days-from-civil algorithm (proleptic Gregorian, exact for all Int64 days).
    init(_ civil: CivilDateTime) {
        let y = Int64(civil.month <= 2 ? civil.year - 1 : civil.year)
        let era = (y >= 0 ? y : y - 399) / 400
        let yoe = y - era * 400
        let m = Int64(civil.month)
        let doy = (153 * (m > 2 ? m - 3 : m + 9) + 2) / 5 + Int64(civil.day) - 1
        let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy
        let days = era * 146_097 + doe - 719_468
        let seconds = days * 86_400 + Int64(civil.hour) * 3600 + Int64(civil.minute) * 60 + Int64(civil.second)
        self.init(millisecondsSinceEpoch: seconds * 1000 + Int64(civil.millisecond))
    }

    var civil: CivilDateTime {
        let ms = millisecondsSinceEpoch
        let totalSeconds = ms >= 0 ? ms / 1000 : (ms - 999) / 1000
        let millisecond = Int(ms - totalSeconds * 1000)
        let days = totalSeconds >= 0 ? totalSeconds / 86_400 : (totalSeconds - 86_399) / 86_400
        let secondOfDay = Int(totalSeconds - days * 86_400)
        let z = days + 719_468
        let era = (z >= 0 ? z : z - 146_096) / 146_097
        let doe = z - era * 146_097
        let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365
        let doy = doe - (365 * yoe + yoe / 4 - yoe / 100)
        let mp = (5 * doy + 2) / 153
        let day = Int(doy - (153 * mp + 2) / 5 + 1)
        let month = Int(mp < 10 ? mp + 3 : mp - 9)
        let year = Int(yoe + era * 400) + (month <= 2 ? 1 : 0)
        return CivilDateTime(
            year: year, month: month, day: day, hour: secondOfDay / 3600,
            minute: secondOfDay % 3600 / 60, second: secondOfDay % 60, millisecond: millisecond)
    }

    /// ISO-8601 in UTC with milliseconds, as every API response prints instants.
    var iso8601: String {
        let c = civil
        guard (0...9999).contains(c.year) else { return paddedISO8601(c) }
        // YYYY-MM-DDTHH:MM:SS.mmmZ written straight into the string's storage (hot: every
        // snapshot and log line formats several).
        return String(unsafeUninitializedCapacity: 24) { buffer in
            func put(_ value: Int, _ width: Int, at offset: Int) {
                var v = value
                for i in stride(from: offset + width - 1, through: offset, by: -1) {
                    buffer[i] = UInt8(48 + v % 10)
                    v /= 10
                }
            }
            put(c.year, 4, at: 0)
            buffer[4] = 0x2D
            put(c.month, 2, at: 5)
            buffer[7] = 0x2D
            put(c.day, 2, at: 8)
            buffer[10] = 0x54
            put(c.hour, 2, at: 11)
            buffer[13] = 0x3A
            put(c.minute, 2, at: 14)
            buffer[16] = 0x3A
            put(c.second, 2, at: 17)
            buffer[19] = 0x2E
            put(c.millisecond, 3, at: 20)
            buffer[23] = 0x5A
            return 24
        }
    }

    private func paddedISO8601(_ c: CivilDateTime) -> String {
        func pad(_ v: Int, _ width: Int) -> String {
            let s = String(v)
            return s.count >= width ? s : String(repeating: "0", count: width - s.count) + s
        }
        return
            "\(pad(c.year, 4))-\(pad(c.month, 2))-\(pad(c.day, 2))T\(pad(c.hour, 2)):\(pad(c.minute, 2)):\(pad(c.second, 2)).\(pad(c.millisecond, 3))Z"
    }

    /// Parses `YYYY-MM-DDTHH:MM:SS[.fff][Z|+HH:MM|-HH:MM]` and `YYYY-MM-DD` (midnight UTC),
    /// refusing what is not a real instant: a day the month does not have (2026-02-31,
    /// 2025-02-29), hours past 23, minutes or seconds past 59 (no leap seconds), an offset
    /// past ±23:59. The calendar is the C library's: the fields go through `timegm` and
    /// come back through `gmtime_r`, and any field the round trip changes was not a real
    /// date (nothing here adds days to months by hand).
    init?(iso8601 text: String) {
        let b = Array(text.utf8)
        func digits(_ start: Int, _ count: Int) -> Int? {
            guard start + count <= b.count else { return nil }
            var v = 0
            for i in start..<(start + count) {
                guard b[i] >= 48 && b[i] <= 57 else { return nil }
                v = v * 10 + Int(b[i] - 48)
            }
            return v
        }
        guard b.count >= 10, let year = digits(0, 4), b[4] == 45, let month = digits(5, 2), b[7] == 45,
            let day = digits(8, 2)
        else { return nil }
        var hour = 0
        var minute = 0
        var second = 0
        var millisecond = 0
        var offsetSeconds = 0
        if b.count > 10 {
            guard b.count >= 19, b[10] == 84 || b[10] == 32, let h = digits(11, 2), b[13] == 58,
                let m = digits(14, 2), b[16] == 58, let s = digits(17, 2)
            else { return nil }
            (hour, minute, second) = (h, m, s)
            var i = 19
            if i < b.count, b[i] == 46 {
                i += 1
                var scale = 100
                let start = i
                while i < b.count, b[i] >= 48, b[i] <= 57 {
                    millisecond += Int(b[i] - 48) * scale
                    scale /= 10
                    i += 1
                }
                guard i > start, i - start <= 9 else { return nil }
            }
            if i == b.count || (b[i] == 90 && i + 1 == b.count) {
                offsetSeconds = 0
            } else if (b[i] == 43 || b[i] == 45), i + 6 == b.count, let oh = digits(i + 1, 2), b[i + 3] == 58,
                let om = digits(i + 4, 2), oh <= 23, om <= 59
            {
                offsetSeconds = (oh * 3600 + om * 60) * (b[i] == 45 ? -1 : 1)
            } else {
                return nil
            }
        }
        guard
            let seconds = Timestamp.calendarSeconds(
                year: year, month: month, day: day, hour: hour, minute: minute,
                second: second)
        else { return nil }
        let milliseconds = (seconds - Int64(offsetSeconds)) * 1000 + Int64(millisecond)
        // The instant itself must be in years 0000–9999 UTC, where `iso8601` writes it back
        // as YYYY: an offset may carry a date at the edge outside (0000-01-01T01:00+02:00 is
        // in year -1), which no four-digit year can name.
        guard (Timestamp.earliest...Timestamp.latest).contains(milliseconds) else { return nil }
        self.init(millisecondsSinceEpoch: milliseconds)
    }

    /// 0000-01-01T00:00:00.000Z and 9999-12-31T23:59:59.999Z: the instants ISO 8601's
    /// four-digit years can name.
    static let earliest: Int64 = -62_167_219_200_000
    static let latest: Int64 = 253_402_300_799_999

    /// Seconds since the epoch of a UTC calendar date-time, or nil when it does not exist:
    /// `timegm` normalizes out-of-range fields (February 31 becomes March 3), so the fields
    /// are compared after a round trip through `gmtime_r`.
    static func calendarSeconds(year: Int, month: Int, day: Int, hour: Int, minute: Int, second: Int) -> Int64? {
        guard (1...12).contains(month), (1...31).contains(day), (0...23).contains(hour), (0...59).contains(minute),
            (0...59).contains(second)
        else { return nil }
        var fields = tm()
        fields.tm_year = Int32(year - 1900)
        fields.tm_mon = Int32(month - 1)
        fields.tm_mday = Int32(day)
        fields.tm_hour = Int32(hour)
        fields.tm_min = Int32(minute)
        fields.tm_sec = Int32(second)
        var seconds = timegm(&fields)
        var back = tm()
        guard gmtime_r(&seconds, &back) != nil, back.tm_year == Int32(year - 1900), back.tm_mon == Int32(month - 1),
            back.tm_mday == Int32(day), back.tm_hour == Int32(hour), back.tm_min == Int32(minute),
            back.tm_sec == Int32(second)
        else { return nil }
        return Int64(seconds)
    }
}
