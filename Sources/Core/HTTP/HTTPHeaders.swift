/// An ordered list of header fields with case-insensitive lookup by name. Used both for
/// request headers (rebuilt from FastCGI `HTTP_*` params) and response headers.
public struct HTTPHeaders: Sendable, Equatable, Sequence, ExpressibleByDictionaryLiteral {
    public private(set) var fields: [(name: String, value: String)] = []

    public init() {}

    public init(dictionaryLiteral elements: (String, String)...) {
        for (name, value) in elements { add(name: name, value: value) }
    }

    /// The first value of `name` (any case), or nil.
    public subscript(name: String) -> String? {
        get {
            let key = name.lowercased()
            return fields.first { $0.name.lowercased() == key }?.value
        }
        set {
            remove(name: name)
            if let newValue { add(name: name, value: newValue) }
        }
    }

    /// All values of `name` (any case), in order.
    public func values(for name: String) -> [String] {
        let key = name.lowercased()
        return fields.filter { $0.name.lowercased() == key }.map(\.value)
    }

    public func contains(_ name: String) -> Bool { self[name] != nil }

    public mutating func add(name: String, value: String) {
        fields.append((name: name, value: value))
    }

    public mutating func remove(name: String) {
        let key = name.lowercased()
        fields.removeAll { $0.name.lowercased() == key }
    }

    public var count: Int { fields.count }

    public func makeIterator() -> IndexingIterator<[(name: String, value: String)]> {
        fields.makeIterator()
    }

    public static func == (lhs: HTTPHeaders, rhs: HTTPHeaders) -> Bool {
        lhs.fields.elementsEqual(rhs.fields) { $0.name.lowercased() == $1.name.lowercased() && $0.value == $1.value }
    }
}
