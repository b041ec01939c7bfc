/// One value bound to a `?` placeholder or read from a result column.
///
/// Results are typed by the column's metadata: integers → `int`/`uint` (by the UNSIGNED
/// flag), FLOAT/DOUBLE → `double`, DECIMAL → `string` (exact), DATE/DATETIME/TIMESTAMP →
/// `timestamp` (UTC, milliseconds), binary columns (charset 63) → `bytes`, everything else
/// (VARCHAR, TEXT, JSON, TIME, ENUM) → `string`.
enum SQLValue: Sendable, Equatable {
    case null
    case int(Int64)
    case uint(UInt64)
    case double(Double)
    case string(String)
    case bytes([UInt8])
    case timestamp(Timestamp)

    /// Booleans are stored as TINYINT 0/1.
    static func bool(_ value: Bool) -> SQLValue { .int(value ? 1 : 0) }

    /// JSON is bound as its compact serialized text (for LONGTEXT CHECK (JSON_VALID(...)) columns).
    static func json(_ value: JSON) -> SQLValue { .string(value.serializedString()) }

    var isNull: Bool { self == .null }

    /// A short name of the case, for error messages (never the value itself).
    var typeName: String {
        switch self {
        case .null: return "null"
        case .int: return "int"
        case .uint: return "uint"
        case .double: return "double"
        case .string: return "string"
        case .bytes: return "bytes"
        case .timestamp: return "timestamp"
        }
    }
}
