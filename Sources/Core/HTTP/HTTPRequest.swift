/// One HTTP request as the worker sees it: plain Swift values copied out of libfcgi.
struct HTTPRequest: Sendable {
    var method: HTTPMethod
    /// The path without the query string, as the client sent it (not percent-decoded).
    var path: String
    /// The raw query string, without `?`.
    var queryString: String
    var headers: HTTPHeaders
    var body: [UInt8]
    /// The client's address as nginx saw it (`REMOTE_ADDR`).
    var remoteAddress: String
    /// Correlates logs and the `X-Request-Id` response header.
    var id: String
    /// Values of `:name` segments of the matched route pattern, set by the Router.
    var pathParameters: [String: String] = [:]

    init(
        method: HTTPMethod, path: String, queryString: String = "", headers: HTTPHeaders = HTTPHeaders(),
        body: [UInt8] = [], remoteAddress: String = "", id: String = ""
    ) {
        self.method = method
        self.path = path
        self.queryString = queryString
        self.headers = headers
        self.body = body
        self.remoteAddress = remoteAddress
        self.id = id
    }

    /// The query string parsed as `application/x-www-form-urlencoded`.
    var queryItems: [QueryItem] { QueryItem.parse(queryString) }

    /// The first value of query parameter `name`.
    func queryValue(_ name: String) -> String? {
        queryItems.first { $0.name == name }?.value
    }

    /// The token of an `Authorization: Bearer <token>` header (scheme case-insensitive).
    var bearerToken: String? {
        guard let value = headers["Authorization"] else { return nil }
        // On the bytes (every access request reads it): spaces before the scheme, the
        // scheme `bearer` in any ASCII case, spaces, then the token without surrounding
        // spaces and tabs.
        let utf8 = value.utf8
        var index = utf8.startIndex
        while index != utf8.endIndex, utf8[index] == UInt8(ascii: " ") { index = utf8.index(after: index) }
        for expected in "bearer".utf8 {
            guard index != utf8.endIndex, utf8[index].asciiLowercased == expected else { return nil }
            index = utf8.index(after: index)
        }
        guard index != utf8.endIndex, utf8[index] == UInt8(ascii: " ") else { return nil }
        let token = value[index...].trimmingSpaces()
        return token.isEmpty ? nil : token
    }

    /// The body parsed as JSON. Malformed input is a 400 (`invalid_json`), never a 500.
    func jsonBody(limits: JSONLimits = .default) throws(APIError) -> JSON {
        try parsingJSONBody { body throws(JSONError) in try JSON.parse(body, limits: limits) }
    }

    /// `jsonBody`, and the compact text of its top-level member `key` as the parser
    /// serializes it (`JSON.parse(_:limits:serializingMember:)`).
    func jsonBody(limits: JSONLimits = .default, serializingMember key: String) throws(APIError) -> (value: JSON, member: [UInt8]?) {
        try parsingJSONBody { body throws(JSONError) in try JSON.parse(body, limits: limits, serializingMember: key) }
    }

    private func parsingJSONBody<T>(_ parse: ([UInt8]) throws(JSONError) -> T) throws(APIError) -> T {
        guard Self.isJSONMediaType(headers["Content-Type"]) else {
            throw APIError.unsupportedMediaType("the body must be application/json", code: "unsupported_media_type")
        }
        guard !body.isEmpty else { throw APIError.badRequest("a JSON body is required", code: "invalid_json") }
        do {
            return try parse(body)
        } catch {
            throw error.apiError ?? APIError.badRequest("invalid JSON", code: "invalid_json")
        }
    }
}

extension HTTPRequest {
    /// A JSON body's `Content-Type`: absent (lenient: some senders omit it), or
    /// `application/json` / `application/*+json`, parameters such as `charset` allowed.
    /// Anything else (forms, text, multipart) is refused with 415 before parsing.
    static func isJSONMediaType(_ value: String?) -> Bool {
        guard let value else { return true }
        // On the bytes, since a media type is ASCII and this runs on every POST (no
        // Character-wise trimming or Unicode lower-casing): up to the first `;`, without
        // surrounding spaces and tabs, ASCII letters folded to lower case.
        let bytes = Array(value.utf8)
        var start = 0
        var end = bytes.firstIndex(of: UInt8(ascii: ";")) ?? bytes.count
        func isBlank(_ byte: UInt8) -> Bool { byte == UInt8(ascii: " ") || byte == UInt8(ascii: "\t") }
        while start < end, isBlank(bytes[start]) { start += 1 }
        while end > start, isBlank(bytes[end - 1]) { end -= 1 }
        if start == end { return true }
        let mediaType = bytes[start..<end].map(\.asciiLowercased)
        return mediaType == jsonMediaType
            || (mediaType.count >= jsonPrefix.count + jsonSuffix.count && mediaType.starts(with: jsonPrefix)
                && mediaType.suffix(jsonSuffix.count).elementsEqual(jsonSuffix))
    }

    private static let jsonMediaType = Array("application/json".utf8)
    private static let jsonPrefix = Array("application/".utf8)
    private static let jsonSuffix = Array("+json".utf8)
}

/// One `name=value` pair of a query string, percent-decoded (`+` is a space).
struct QueryItem: Sendable, Equatable {
    var name: String
    var value: String

    init(name: String, value: String) {
        self.name = name
        self.value = value
    }

    /// Splits on `&`, then on the first `=`. Invalid `%` escapes are kept literally and
    /// invalid UTF-8 becomes U+FFFD, so parsing never fails.
    static func parse(_ query: String) -> [QueryItem] {
        query.split(separator: "&", omittingEmptySubsequences: true).map { pair in
            if let equals = pair.firstIndex(of: "=") {
                return QueryItem(name: percentDecode(pair[..<equals]), value: percentDecode(pair[pair.index(after: equals)...]))
            }
            return QueryItem(name: percentDecode(pair), value: "")
        }
    }

    static func percentDecode(_ text: Substring, plusIsSpace: Bool = true) -> String {
        let bytes = Array(text.utf8)
        var out: [UInt8] = []
        out.reserveCapacity(bytes.count)
        var index = 0
        func hexValue(_ c: UInt8) -> UInt8? {
            switch c {
            case 48...57: return c - 48
            case 65...70: return c - 55
            case 97...102: return c - 87
            default: return nil
            }
        }
        while index < bytes.count {
            let c = bytes[index]
            if c == UInt8(ascii: "%"), index + 2 < bytes.count,
                let high = hexValue(bytes[index + 1]), let low = hexValue(bytes[index + 2])
            {
                out.append(high << 4 | low)
                index += 3
            } else {
                out.append(plusIsSpace && c == UInt8(ascii: "+") ? UInt8(ascii: " ") : c)
                index += 1
            }
        }
        return String(decoding: out, as: UTF8.self)
    }
}

extension Substring {
    /// Index-based, one copy of the kept range: headers such as a ~900-byte bearer token are
    /// trimmed on every request, and rebuilding the String a Character at a time is slow.
    func trimmingSpaces() -> String {
        func isSpace(_ c: Character) -> Bool { c == " " || c == "\t" }
        guard let first = firstIndex(where: { !isSpace($0) }), let last = lastIndex(where: { !isSpace($0) }) else { return "" }
        return String(self[first...last])
    }
}
