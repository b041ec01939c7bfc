/// An ordered list of header fields with case-insensitive lookup by name. Used both for
/// request headers (rebuilt from FastCGI `HTTP_*` params) and response headers.
struct HTTPHeaders: Sendable, Equatable, Sequence, ExpressibleByDictionaryLiteral {
    private(set) var fields: [(name: String, value: String)] = []

    init() {}

    init(dictionaryLiteral elements: (String, String)...) {
        for (name, value) in elements { add(name: name, value: value) }
    }

    /// The first value of `name` (any case), or nil.
    subscript(name: String) -> String? {
        get { fields.first { Self.sameName($0.name, name) }?.value }
        set {
            remove(name: name)
            if let newValue { add(name: name, value: newValue) }
        }
    }

    /// All values of `name` (any case), in order.
    func values(for name: String) -> [String] {
        return fields.filter { Self.sameName($0.name, name) }.map(\.value)
    }

    func contains(_ name: String) -> Bool { self[name] != nil }

    mutating func add(name: String, value: String) {
        fields.append((name: name, value: value))
    }

    mutating func remove(name: String) {
        fields.removeAll { Self.sameName($0.name, name) }
    }

    var count: Int { fields.count }

    func makeIterator() -> IndexingIterator<[(name: String, value: String)]> {
        fields.makeIterator()
    }

    static func == (lhs: HTTPHeaders, rhs: HTTPHeaders) -> Bool {
        lhs.fields.elementsEqual(rhs.fields) { sameName($0.name, $1.name) && $0.value == $1.value }
    }

    /// Field names compare ASCII case-insensitively (RFC 9110 §5.1), without allocating.
    static func sameName(_ a: String, _ b: String) -> Bool {
        a.utf8.count == b.utf8.count
            && a.utf8.elementsEqual(b.utf8) { x, y in
                x == y || (x | 0x20 == y | 0x20 && (x | 0x20) >= 0x61 && (x | 0x20) <= 0x7A)
            }
    }
}
