/// A SQL statement and its bind values, built by string interpolation where every
/// interpolated value becomes a `?` placeholder (as postgres-nio's `PostgresQuery`):
///
///     let rows = try db.query("SELECT id FROM billing_users WHERE id = \(userID) AND deleted_at IS NULL")
///
/// A plain `String` variable cannot become a query; raw SQL needs the loudly named
/// `SQLQuery(unsafeSQL:binds:)` or `\(unsafeRaw: ...)` for trusted fragments such as a
/// column list chosen from constants.
struct SQLQuery: Sendable, Equatable, ExpressibleByStringInterpolation {
    /// The statement text with `?` placeholders, as bytes (`SQLText`: what the statement
    /// cache is keyed by).
    private(set) var text: SQLText
    /// One value per placeholder, in order.
    private(set) var binds: [SQLValue]

    /// The only raw path: `unsafeSQL` is sent as is, so it must never contain untrusted text.
    init(unsafeSQL: String, binds: [SQLValue] = []) {
        self.text = SQLText(unsafeSQL)
        self.binds = binds
    }

    private init(text: SQLText, binds: [SQLValue]) {
        self.text = text
        self.binds = binds
    }

    /// The statement text with `?` placeholders.
    var sql: String { text.string }

    init(stringLiteral value: String) {
        self.init(unsafeSQL: value)
    }

    init(stringInterpolation: StringInterpolation) {
        self.init(text: stringInterpolation.text, binds: stringInterpolation.binds)
    }

    /// Appends another query (its text and binds), e.g. an optional WHERE clause.
    mutating func append(_ other: SQLQuery) {
        text.append(other.text)
        binds += other.binds
    }

    static func + (lhs: SQLQuery, rhs: SQLQuery) -> SQLQuery {
        var result = lhs
        result.append(rhs)
        return result
    }

    struct StringInterpolation: StringInterpolationProtocol {
        var text = SQLText()
        var binds: [SQLValue] = []

        init(literalCapacity: Int, interpolationCount: Int) {
            text.reserveCapacity(literalCapacity + interpolationCount)
            binds.reserveCapacity(interpolationCount)
        }

        mutating func appendLiteral(_ literal: String) { text.append(literal) }

        mutating func appendInterpolation(_ value: SQLValue) {
            text.append(ascii: UInt8(ascii: "?"))
            binds.append(value)
        }

        mutating func appendInterpolation(_ value: String) { appendInterpolation(SQLValue.string(value)) }
        mutating func appendInterpolation(_ value: String?) { appendInterpolation(value.map(SQLValue.string) ?? .null) }
        mutating func appendInterpolation(_ value: Int) { appendInterpolation(SQLValue.int(Int64(value))) }
        mutating func appendInterpolation(_ value: Int?) { appendInterpolation(value.map { SQLValue.int(Int64($0)) } ?? .null) }
        mutating func appendInterpolation(_ value: Int64) { appendInterpolation(SQLValue.int(value)) }
        mutating func appendInterpolation(_ value: Int64?) { appendInterpolation(value.map(SQLValue.int) ?? .null) }
        mutating func appendInterpolation(_ value: UInt64) { appendInterpolation(SQLValue.uint(value)) }
        mutating func appendInterpolation(_ value: UInt64?) { appendInterpolation(value.map(SQLValue.uint) ?? .null) }
        mutating func appendInterpolation(_ value: Double) { appendInterpolation(SQLValue.double(value)) }
        mutating func appendInterpolation(_ value: Double?) { appendInterpolation(value.map(SQLValue.double) ?? .null) }
        mutating func appendInterpolation(_ value: Bool) { appendInterpolation(SQLValue.bool(value)) }
        mutating func appendInterpolation(_ value: Bool?) { appendInterpolation(value.map(SQLValue.bool) ?? .null) }
        mutating func appendInterpolation(_ value: Timestamp) { appendInterpolation(SQLValue.timestamp(value)) }
        mutating func appendInterpolation(_ value: Timestamp?) { appendInterpolation(value.map(SQLValue.timestamp) ?? .null) }
        mutating func appendInterpolation(_ value: [UInt8]) { appendInterpolation(SQLValue.bytes(value)) }
        mutating func appendInterpolation(_ value: [UInt8]?) { appendInterpolation(value.map(SQLValue.bytes) ?? .null) }
        /// JSON is bound as its compact serialized text.
        mutating func appendInterpolation(_ value: JSON) { appendInterpolation(SQLValue.json(value)) }
        mutating func appendInterpolation(_ value: JSON?) { appendInterpolation(value.map(SQLValue.json) ?? .null) }

        /// `?, ?, ?` for an `IN (...)` list; an empty list becomes `NULL`, which matches nothing.
        mutating func appendInterpolation(list values: [SQLValue]) {
            if values.isEmpty {
                text.append("NULL")
                return
            }
            for (index, value) in values.enumerated() {
                if index > 0 { text.append(", ") }
                appendInterpolation(value)
            }
        }

        /// An embedded query with its own binds.
        mutating func appendInterpolation(_ query: SQLQuery) {
            text.append(query.text)
            binds += query.binds
        }

        /// Trusted SQL text inserted verbatim (a column list or ORDER BY chosen from constants).
        /// Never pass anything derived from input.
        mutating func appendInterpolation(unsafeRaw fragment: String) { text.append(fragment) }
    }
}
