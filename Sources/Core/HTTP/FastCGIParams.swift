/// The FastCGI params of one request, in the order the web server sent them (nginx: its
/// `fastcgi_param` lines, then the request headers as `HTTP_*`). A short list, looked up by
/// name with a linear scan: for a few dozen names that is cheaper than hashing every name
/// into a dictionary, and the order is kept.
struct FastCGIParams: Sendable, Equatable, Sequence, ExpressibleByDictionaryLiteral {
    private(set) var pairs: [(name: String, value: String)]

    init(_ pairs: [(name: String, value: String)] = []) { self.pairs = pairs }

    /// From a dictionary (tests, tools): sorted by name, so the result is deterministic.
    init(_ dictionary: [String: String]) {
        pairs = dictionary.sorted { $0.key < $1.key }.map { (name: $0.key, value: $0.value) }
    }

    init(dictionaryLiteral elements: (String, String)...) {
        pairs = elements.map { (name: $0.0, value: $0.1) }
    }

    mutating func append(name: String, value: String) { pairs.append((name: name, value: value)) }

    /// The first value of `name` (exact, as CGI names are upper case), or nil.
    subscript(name: String) -> String? {
        for pair in pairs where pair.name == name { return pair.value }
        return nil
    }

    var count: Int { pairs.count }

    func makeIterator() -> IndexingIterator<[(name: String, value: String)]> { pairs.makeIterator() }

    static func == (lhs: FastCGIParams, rhs: FastCGIParams) -> Bool {
        lhs.pairs.elementsEqual(rhs.pairs) { $0.name == $1.name && $0.value == $1.value }
    }
}
