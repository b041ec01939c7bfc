import Glibc

/// The column names of one result set, shared by all its rows so that rows carry no
/// per-row copy of the names.
///
/// A lookup by name scans the names' UTF-8 bytes: for the twenty to thirty columns a
/// statement names, a length check rules out most of them and a `memcmp` decides the rest,
/// which is cheaper than hashing the name for a dictionary probe or comparing `String`s.
/// The first column of a given name wins, as in `SELECT a.id, b.id`.
final class SQLColumns: Sendable {
    let names: [String]
    private let utf8Names: [[UInt8]]

    init(names: [String]) {
        self.names = names
        self.utf8Names = names.map { Array($0.utf8) }
    }

    func index(of name: String) -> Int? {
        name.utf8.withContiguousStorageIfAvailable { key -> Int? in
            for (position, candidate) in utf8Names.enumerated() where candidate.count == key.count {
                let same = candidate.withUnsafeBufferPointer { column in
                    key.isEmpty || memcmp(column.baseAddress!, key.baseAddress!, key.count) == 0
                }
                if same { return position }
            }
            return nil
        } ?? names.firstIndex(of: name)
    }
}

/// One result row. Values are typed from the column metadata (see `SQLValue`); the typed
/// accessors throw `DatabaseError` (`.columnNotFound`, `.typeMismatch`) with the column
/// name, never the value.
struct SQLRow: Sendable {
    let columns: SQLColumns
    let values: [SQLValue]

    init(columns: SQLColumns, values: [SQLValue]) {
        self.columns = columns
        self.values = values
    }

    /// The value of `column`, or `.null` when the result has no such column; use the typed
    /// accessors when a missing column must be an error.
    subscript(column: String) -> SQLValue {
        guard let index = columns.index(of: column) else { return .null }
        return values[index]
    }

    subscript(index: Int) -> SQLValue { values[index] }

    func value(_ column: String) throws(DatabaseError) -> SQLValue {
        guard let index = columns.index(of: column) else {
            throw DatabaseError(kind: .columnNotFound, detail: "column '\(column)'")
        }
        return values[index]
    }

    private func mismatch(_ column: String, _ expected: String, _ value: SQLValue) -> DatabaseError {
        DatabaseError(kind: .typeMismatch, detail: "column '\(column)' is \(value.typeName), expected \(expected)")
    }

    func string(_ column: String) throws(DatabaseError) -> String {
        guard let value = try optionalString(column) else { throw mismatch(column, "string", .null) }
        return value
    }

    /// A text value; binary columns are accepted when they hold valid UTF-8.
    func optionalString(_ column: String) throws(DatabaseError) -> String? {
        switch try value(column) {
        case .null: return nil
        case .string(let s): return s
        case .bytes(let b):
            guard let s = String(validating: b, as: UTF8.self) else { throw mismatch(column, "string", .bytes(b)) }
            return s
        case let other: throw mismatch(column, "string", other)
        }
    }

    func int64(_ column: String) throws(DatabaseError) -> Int64 {
        guard let value = try optionalInt64(column) else { throw mismatch(column, "int64", .null) }
        return value
    }

    /// Integers of either signedness that fit, and DECIMAL results without a fraction
    /// (MariaDB types `SUM(int_column)` as DECIMAL).
    func optionalInt64(_ column: String) throws(DatabaseError) -> Int64? {
        let v = try value(column)
        switch v {
        case .null: return nil
        case .int(let i): return i
        case .uint(let u):
            guard let i = Int64(exactly: u) else { throw mismatch(column, "int64", v) }
            return i
        case .string(let s):
            let parts = s.split(separator: ".", maxSplits: 1, omittingEmptySubsequences: false)
            guard let i = Int64(parts[0]), parts.count == 1 || parts[1].allSatisfy({ $0 == "0" }) else {
                throw mismatch(column, "int64", v)
            }
            return i
        default: throw mismatch(column, "int64", v)
        }
    }

    /// A whole number that may exceed Int64 (a `SUM` of money: DECIMAL), saturated at its
    /// bounds like `Money.add`.
    func saturatedInt64(_ column: String) throws(DatabaseError) -> Int64 {
        let v = try value(column)
        if case .string(let s) = v, Int64(s) == nil, let first = s.first, s.allSatisfy({ $0.isASCII && ($0.isNumber || $0 == "-") }),
            s.count > 18
        {
            return first == "-" ? Int64.min : Int64.max
        }
        return try int64(column)
    }

    func uint64(_ column: String) throws(DatabaseError) -> UInt64 {
        let v = try value(column)
        switch v {
        case .uint(let u): return u
        case .int(let i) where i >= 0: return UInt64(i)
        default: throw mismatch(column, "uint64", v)
        }
    }

    func int(_ column: String) throws(DatabaseError) -> Int {
        Int(try int64(column))
    }

    func optionalInt(_ column: String) throws(DatabaseError) -> Int? {
        try optionalInt64(column).map { Int($0) }
    }

    /// TINYINT 0/1 (any non-zero integer is true).
    func bool(_ column: String) throws(DatabaseError) -> Bool {
        try int64(column) != 0
    }

    /// FLOAT/DOUBLE, integers, and DECIMAL text.
    func double(_ column: String) throws(DatabaseError) -> Double {
        let v = try value(column)
        switch v {
        case .double(let d): return d
        case .int(let i): return Double(i)
        case .uint(let u): return Double(u)
        case .string(let s):
            guard let d = Double(s) else { throw mismatch(column, "double", v) }
            return d
        default: throw mismatch(column, "double", v)
        }
    }

    func optionalDouble(_ column: String) throws(DatabaseError) -> Double? {
        if try value(column) == .null { return nil }
        return try double(column)
    }

    func timestamp(_ column: String) throws(DatabaseError) -> Timestamp {
        guard let value = try optionalTimestamp(column) else { throw mismatch(column, "timestamp", .null) }
        return value
    }

    func optionalTimestamp(_ column: String) throws(DatabaseError) -> Timestamp? {
        switch try value(column) {
        case .null: return nil
        case .timestamp(let t): return t
        case let other: throw mismatch(column, "timestamp", other)
        }
    }

    /// Binary columns as they are; text columns as their UTF-8 bytes.
    func bytes(_ column: String) throws(DatabaseError) -> [UInt8] {
        switch try value(column) {
        case .bytes(let b): return b
        case .string(let s): return Array(s.utf8)
        case let other: throw mismatch(column, "bytes", other)
        }
    }

    /// Parses a JSON text column (payloads are stored as LONGTEXT with a JSON_VALID check).
    func json(_ column: String) throws(DatabaseError) -> JSON {
        let v = try value(column)
        let bytes: [UInt8]
        switch v {
        case .string(let s): bytes = Array(s.utf8)
        case .bytes(let b): bytes = b
        default: throw mismatch(column, "json", v)
        }
        do {
            return try JSON.parse(bytes, limits: JSONLimits(maxBytes: Int(Int32.max), maxDepth: 512))
        } catch {
            throw DatabaseError(kind: .typeMismatch, detail: "column '\(column)' is not valid JSON")
        }
    }

    func optionalJSON(_ column: String) throws(DatabaseError) -> JSON? {
        if try value(column) == .null { return nil }
        return try json(column)
    }
}
