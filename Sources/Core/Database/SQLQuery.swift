/// A SQL statement and its bind values, built by string interpolation where every
/// interpolated value becomes a `?` placeholder (as postgres-nio's `PostgresQuery`):
///
///     let rows = try db.query("SELECT id FROM billing_users WHERE id = \(userID) AND deleted_at IS NULL")
///
/// A plain `String` variable cannot become a query; raw SQL needs the loudly named
/// `SQLQuery(unsafeSQL:binds:)` or `\(unsafeRaw: ...)` for trusted fragments such as a
/// column list chosen from constants.
public struct SQLQuery: Sendable, Equatable, ExpressibleByStringInterpolation {
    /// The statement text with `?` placeholders.
    public private(set) var sql: String
    /// One value per placeholder, in order.
    public private(set) var binds: [SQLValue]

    /// The only raw path: `unsafeSQL` is sent as is, so it must never contain untrusted text.
    public init(unsafeSQL: String, binds: [SQLValue] = []) {
        self.sql = unsafeSQL
        self.binds = binds
    }

    public init(stringLiteral value: String) {
        self.init(unsafeSQL: value)
    }

    public init(stringInterpolation: StringInterpolation) {
        self.init(unsafeSQL: stringInterpolation.sql, binds: stringInterpolation.binds)
    }

    /// Appends another query (its text and binds), e.g. an optional WHERE clause.
    public mutating func append(_ other: SQLQuery) {
        sql += other.sql
        binds += other.binds
    }

    public static func + (lhs: SQLQuery, rhs: SQLQuery) -> SQLQuery {
        var result = lhs
        result.append(rhs)
        return result
    }

    public struct StringInterpolation: StringInterpolationProtocol {
        var sql = ""
        var binds: [SQLValue] = []

        public init(literalCapacity: Int, interpolationCount: Int) {
            sql.reserveCapacity(literalCapacity + interpolationCount)
            binds.reserveCapacity(interpolationCount)
        }

        public mutating func appendLiteral(_ literal: String) { sql += literal }

        public mutating func appendInterpolation(_ value: SQLValue) {
            sql += "?"
            binds.append(value)
        }

        public mutating func appendInterpolation(_ value: String) { appendInterpolation(SQLValue.string(value)) }
        public mutating func appendInterpolation(_ value: String?) { appendInterpolation(value.map(SQLValue.string) ?? .null) }
        public mutating func appendInterpolation(_ value: Int) { appendInterpolation(SQLValue.int(Int64(value))) }
        public mutating func appendInterpolation(_ value: Int?) { appendInterpolation(value.map { SQLValue.int(Int64($0)) } ?? .null) }
        public mutating func appendInterpolation(_ value: Int64) { appendInterpolation(SQLValue.int(value)) }
        public mutating func appendInterpolation(_ value: Int64?) { appendInterpolation(value.map(SQLValue.int) ?? .null) }
        public mutating func appendInterpolation(_ value: UInt64) { appendInterpolation(SQLValue.uint(value)) }
        public mutating func appendInterpolation(_ value: UInt64?) { appendInterpolation(value.map(SQLValue.uint) ?? .null) }
        public mutating func appendInterpolation(_ value: Double) { appendInterpolation(SQLValue.double(value)) }
        public mutating func appendInterpolation(_ value: Double?) { appendInterpolation(value.map(SQLValue.double) ?? .null) }
        public mutating func appendInterpolation(_ value: Bool) { appendInterpolation(SQLValue.bool(value)) }
        public mutating func appendInterpolation(_ value: Bool?) { appendInterpolation(value.map(SQLValue.bool) ?? .null) }
        public mutating func appendInterpolation(_ value: Timestamp) { appendInterpolation(SQLValue.timestamp(value)) }
        public mutating func appendInterpolation(_ value: Timestamp?) { appendInterpolation(value.map(SQLValue.timestamp) ?? .null) }
        public mutating func appendInterpolation(_ value: [UInt8]) { appendInterpolation(SQLValue.bytes(value)) }
        public mutating func appendInterpolation(_ value: [UInt8]?) { appendInterpolation(value.map(SQLValue.bytes) ?? .null) }
        /// JSON is bound as its compact serialized text.
        public mutating func appendInterpolation(_ value: JSON) { appendInterpolation(SQLValue.json(value)) }
        public mutating func appendInterpolation(_ value: JSON?) { appendInterpolation(value.map(SQLValue.json) ?? .null) }

        /// `?, ?, ?` for an `IN (...)` list; an empty list becomes `NULL`, which matches nothing.
        public mutating func appendInterpolation(list values: [SQLValue]) {
            if values.isEmpty {
                sql += "NULL"
                return
            }
            for (index, value) in values.enumerated() {
                if index > 0 { sql += ", " }
                appendInterpolation(value)
            }
        }

        /// An embedded query with its own binds.
        public mutating func appendInterpolation(_ query: SQLQuery) {
            sql += query.sql
            binds += query.binds
        }

        /// Trusted SQL text inserted verbatim (a column list or ORDER BY chosen from constants).
        /// Never pass anything derived from input.
        public mutating func appendInterpolation(unsafeRaw fragment: String) { sql += fragment }
    }
}
