/// An HTTP request method, compared by its upper-case token.
struct HTTPMethod: Sendable, Hashable, RawRepresentable, ExpressibleByStringLiteral, CustomStringConvertible {
    let rawValue: String

    init(rawValue: String) { self.rawValue = rawValue.uppercased() }
    init(_ rawValue: String) { self.init(rawValue: rawValue) }
    init(stringLiteral value: String) { self.init(rawValue: value) }

    static let get: HTTPMethod = "GET"
    static let head: HTTPMethod = "HEAD"
    static let post: HTTPMethod = "POST"
    static let put: HTTPMethod = "PUT"
    static let patch: HTTPMethod = "PATCH"
    static let delete: HTTPMethod = "DELETE"
    static let options: HTTPMethod = "OPTIONS"

    var description: String { rawValue }
}
