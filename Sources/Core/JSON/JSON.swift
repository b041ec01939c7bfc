/// A JSON value. Parsing and serialization are done by jansson (see `JSON+Jansson.swift`);
/// this enum is the immutable, `Sendable` Swift view that domain code works with.
enum JSON: Sendable, Equatable {
    case null
    case bool(Bool)
    case int(Int64)
    case double(Double)
    case string(String)
    case array([JSON])
    case object(JSONObject)
}

/// A JSON object that keeps its keys in insertion order (for stable, readable output)
/// while comparing like a dictionary (key order is not part of JSON's meaning).
struct JSONObject: Sendable, Equatable, Sequence, ExpressibleByDictionaryLiteral {
    private struct Entry: Sendable, Equatable {
        var key: String
        var value: JSON
    }

    /// Members in insertion order. Small objects (responses, log lines: most of them) are
    /// searched linearly, which costs less than hashing every key; past `indexedAbove`
    /// members (parsed payloads can be large) a key → position index keeps lookups O(1).
    private var entries: [Entry] = []
    private var index: [String: Int]?
    private static let indexedAbove = 16

    init() {}

    init(dictionaryLiteral elements: (String, JSON)...) {
        entries.reserveCapacity(elements.count)
        for (key, value) in elements { self[key] = value }
    }

    init<S: Sequence>(_ pairs: S) where S.Element == (String, JSON) {
        for (key, value) in pairs { self[key] = value }
    }

    /// Keys in insertion order.
    var keys: [String] { entries.map(\.key) }
    var count: Int { entries.count }
    var isEmpty: Bool { entries.isEmpty }

    private func position(of key: String) -> Int? {
        if let index { return index[key] }
        return entries.firstIndex { $0.key == key }
    }

    subscript(key: String) -> JSON? {
        get { position(of: key).map { entries[$0].value } }
        set {
            if let newValue {
                if let i = position(of: key) {
                    entries[i].value = newValue
                } else {
                    entries.append(Entry(key: key, value: newValue))
                    if index != nil {
                        index![key] = entries.count - 1
                    } else if entries.count > Self.indexedAbove {
                        rebuildIndex()
                    }
                }
            } else if let i = position(of: key) {
                entries.remove(at: i)
                if index != nil { rebuildIndex() }
            }
        }
    }

    /// Members known to have distinct keys (a parser that refuses duplicates): appended
    /// without looking each key up, the index built once at the end.
    init(distinctMembers members: [(key: String, value: JSON)]) {
        entries = members.map { Entry(key: $0.key, value: $0.value) }
        if entries.count > Self.indexedAbove { rebuildIndex() }
    }

    private mutating func rebuildIndex() {
        var index = [String: Int](minimumCapacity: entries.count)
        for (i, entry) in entries.enumerated() { index[entry.key] = i }
        self.index = index
    }

    func makeIterator() -> some IteratorProtocol<(key: String, value: JSON)> {
        entries.lazy.map { (key: $0.key, value: $0.value) }.makeIterator()
    }

    /// Same members with equal values, in any order.
    static func == (lhs: JSONObject, rhs: JSONObject) -> Bool {
        lhs.count == rhs.count && lhs.entries.allSatisfy { rhs[$0.key] == $0.value }
    }

    /// Same members in the same order with identical values: what serializes to the same
    /// text (`==` ignores order, and pays a key lookup per member for it).
    func isIdentical(to other: JSONObject) -> Bool {
        entries.count == other.entries.count
            && zip(entries, other.entries).allSatisfy { a, b in
                a.key.utf8.elementsEqual(b.key.utf8) && a.value.isIdentical(to: b.value)
            }
    }
}

extension JSON {
    /// Equal, and objects' members in the same order throughout: the same text when serialized.
    func isIdentical(to other: JSON) -> Bool {
        switch (self, other) {
        case (.object(let a), .object(let b)): return a.isIdentical(to: b)
        case (.array(let a), .array(let b)): return a.count == b.count && zip(a, b).allSatisfy { $0.isIdentical(to: $1) }
        case (.string(let a), .string(let b)): return a.utf8.elementsEqual(b.utf8)  // == is canonical equivalence
        case (.double(let a), .double(let b)): return a.bitPattern == b.bitPattern  // == holds for 0.0 and -0.0
        default: return self == other
        }
    }
}

// MARK: - Accessors

extension JSON {
    /// The member `key` of an object; nil for a missing key or a non-object.
    subscript(key: String) -> JSON? {
        if case .object(let object) = self { return object[key] }
        return nil
    }

    /// The element at `index` of an array; nil when out of range or not an array.
    subscript(index: Int) -> JSON? {
        if case .array(let array) = self, array.indices.contains(index) { return array[index] }
        return nil
    }

    var isNull: Bool { if case .null = self { return true } else { return false } }
    var stringValue: String? { if case .string(let v) = self { return v } else { return nil } }
    var boolValue: Bool? { if case .bool(let v) = self { return v } else { return nil } }
    var arrayValue: [JSON]? { if case .array(let v) = self { return v } else { return nil } }
    var objectValue: JSONObject? { if case .object(let v) = self { return v } else { return nil } }

    /// Integers only; a JSON real with an integral value (`3.0`) also counts, since
    /// many producers cannot tell the two apart.
    var int64Value: Int64? {
        switch self {
        case .int(let v): return v
        case .double(let v) where v.rounded() == v && abs(v) < 9.0e15: return Int64(v)
        default: return nil
        }
    }

    var intValue: Int? { int64Value.flatMap { Int(exactly: $0) } }

    /// Any JSON number as a Double.
    var doubleValue: Double? {
        switch self {
        case .int(let v): return Double(v)
        case .double(let v): return v
        default: return nil
        }
    }

    /// The JSON type name, for error messages ("expected string, got array").
    var typeName: String {
        switch self {
        case .null: return "null"
        case .bool: return "boolean"
        case .int, .double: return "number"
        case .string: return "string"
        case .array: return "array"
        case .object: return "object"
        }
    }
}

// MARK: - Literals

extension JSON: ExpressibleByNilLiteral, ExpressibleByBooleanLiteral, ExpressibleByIntegerLiteral,
    ExpressibleByFloatLiteral, ExpressibleByStringLiteral, ExpressibleByArrayLiteral,
    ExpressibleByDictionaryLiteral
{
    init(nilLiteral: ()) { self = .null }
    init(booleanLiteral value: Bool) { self = .bool(value) }
    init(integerLiteral value: Int64) { self = .int(value) }
    init(floatLiteral value: Double) { self = .double(value) }
    init(stringLiteral value: String) { self = .string(value) }
    init(arrayLiteral elements: JSON...) { self = .array(elements) }
    init(dictionaryLiteral elements: (String, JSON)...) {
        self = .object(JSONObject(elements))
    }
}

extension JSON {
    /// Convenience for optional values in built responses: nil becomes JSON null.
    init(_ value: String?) { self = value.map(JSON.string) ?? .null }
    init(_ value: Int64?) { self = value.map(JSON.int) ?? .null }
    init(_ value: Int?) { self = value.map { JSON.int(Int64($0)) } ?? .null }
    init(_ value: Bool?) { self = value.map(JSON.bool) ?? .null }
}
