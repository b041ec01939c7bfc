/// The `params` member of a request with accessors that validate as they read: each
/// failure is an `RPCError` -32602 whose message names the parameter and what was wrong,
/// so handlers read like `let user = try params.requireString("userId")`.
///
/// Named accessors treat absent params as an empty object and an explicit JSON `null`
/// member as absent (optional accessors return nil, required ones report it as missing).
struct RPCParams: Sendable, Equatable {
    /// The raw member: nil when absent, otherwise an array or an object.
    let value: JSON?

    init(_ value: JSON?) { self.value = value }

    var isAbsent: Bool { value == nil }

    /// By-position params, nil when params are named or absent.
    var positional: [JSON]? { value?.arrayValue }

    /// By-name params (empty when absent), or -32602 when they were sent by position.
    func named() throws(RPCError) -> JSONObject {
        switch value {
        case nil: return JSONObject()
        case .object(let object)?: return object
        default: throw .invalidParams("params must be an object with named members")
        }
    }

    /// The member `key`, nil when missing or null.
    func optionalValue(_ key: String) throws(RPCError) -> JSON? {
        let member = try named()[key]
        return member == .null ? nil : member
    }

    func requireValue(_ key: String) throws(RPCError) -> JSON {
        guard let member = try optionalValue(key) else { throw .invalidParams("\"\(key)\" is required", field: key) }
        return member
    }

    /// Refuses members other than `keys`, so a typo (`userID`) is an error, not a silent default.
    /// With no keys: the method takes no params (absent, `{}` and `[]` are accepted).
    func expectOnly(_ keys: String...) throws(RPCError) {
        try expectOnly(keys)
    }

    func expectOnly(_ keys: [String]) throws(RPCError) {
        if keys.isEmpty, value == .array([]) { return }
        let allowed = Set(keys)
        guard let unknown = try named().keys.first(where: { !allowed.contains($0) }) else { return }
        if keys.isEmpty { throw .invalidParams("this method takes no params, got \"\(unknown)\"", field: unknown) }
        throw .invalidParams("unknown parameter \"\(unknown)\" (expected: \(keys.joined(separator: ", ")))", field: unknown)
    }

    /// The array `key` of at most `limit` objects, each read by `element`; an error inside
    /// one names it (`users[3].createdAt`, "Invalid params: users[3]: ...").
    func requireObjects<T>(
        _ key: String, atMost limit: Int, noun: String, _ element: (RPCParams) throws(RPCError) -> T
    ) throws(RPCError) -> [T] {
        let elements = try requireArray(key)
        guard elements.count <= limit else { throw .invalidParams("\"\(key)\" holds at most \(limit) \(noun) per call", field: key) }
        var values: [T] = []
        values.reserveCapacity(elements.count)
        for (index, member) in elements.enumerated() {
            let field = "\(key)[\(index)]"
            guard case .object = member else { throw .invalidParams("\"\(field)\" must be an object", field: field) }
            do {
                values.append(try element(RPCParams(member)))
            } catch {
                var nested = error
                let inner = (error.data?["field"]?.stringValue).map { "\(field).\($0)" } ?? field
                nested.data = ["field": .string(inner)]
                let prefix = "Invalid params: "
                if error.message.hasPrefix(prefix) { nested.message = prefix + field + ": " + error.message.dropFirst(prefix.count) }
                throw nested
            }
        }
        return values
    }

    // MARK: Typed accessors

    func requireString(_ key: String, maxLength: Int? = nil) throws(RPCError) -> String {
        try string(key, requireValue(key), maxLength: maxLength)
    }

    func optionalString(_ key: String, maxLength: Int? = nil) throws(RPCError) -> String? {
        guard let member = try optionalValue(key) else { return nil }
        return try string(key, member, maxLength: maxLength)
    }

    /// A string restricted to `allowed` values (an enum on the wire).
    func requireString(_ key: String, oneOf allowed: [String]) throws(RPCError) -> String {
        try oneOf(key, requireString(key), allowed)
    }

    func optionalString(_ key: String, oneOf allowed: [String]) throws(RPCError) -> String? {
        guard let text = try optionalString(key) else { return nil }
        return try oneOf(key, text, allowed)
    }

    /// An integer (a real with an integral value is accepted), optionally within `range`.
    func requireInt(_ key: String, in range: ClosedRange<Int>? = nil) throws(RPCError) -> Int {
        try int(key, requireValue(key), range)
    }

    func optionalInt(_ key: String, in range: ClosedRange<Int>? = nil) throws(RPCError) -> Int? {
        guard let member = try optionalValue(key) else { return nil }
        return try int(key, member, range)
    }

    func requireBool(_ key: String) throws(RPCError) -> Bool {
        try bool(key, requireValue(key))
    }

    func optionalBool(_ key: String) throws(RPCError) -> Bool? {
        guard let member = try optionalValue(key) else { return nil }
        return try bool(key, member)
    }

    /// An ISO-8601 instant (`2026-01-31T12:00:00Z`, `2026-01-31T12:00:00.250+01:00`, or a
    /// date meaning midnight UTC).
    func requireTimestamp(_ key: String) throws(RPCError) -> Timestamp {
        try timestamp(key, requireString(key))
    }

    func optionalTimestamp(_ key: String) throws(RPCError) -> Timestamp? {
        guard let text = try optionalString(key) else { return nil }
        return try timestamp(key, text)
    }

    func requireArray(_ key: String) throws(RPCError) -> [JSON] {
        try array(key, requireValue(key))
    }

    func optionalArray(_ key: String) throws(RPCError) -> [JSON]? {
        guard let member = try optionalValue(key) else { return nil }
        return try array(key, member)
    }

    func requireObject(_ key: String) throws(RPCError) -> JSONObject {
        try object(key, requireValue(key))
    }

    func optionalObject(_ key: String) throws(RPCError) -> JSONObject? {
        guard let member = try optionalValue(key) else { return nil }
        return try object(key, member)
    }

    // MARK: Conversions

    private func mismatch(_ key: String, _ expected: String, _ got: JSON) -> RPCError {
        .invalidParams("\"\(key)\" must be \(expected), got \(got.typeName)", field: key)
    }

    private func string(_ key: String, _ member: JSON, maxLength: Int?) throws(RPCError) -> String {
        guard case .string(let text) = member else { throw mismatch(key, "a string", member) }
        // The database's VARCHAR(n) counts code points, not what Swift's `count` counts
        // (grapheme clusters: one base letter with any number of combining marks is one).
        if let maxLength, text.unicodeScalars.count > maxLength {
            throw .invalidParams("\"\(key)\" must be at most \(maxLength) characters", field: key)
        }
        return text
    }

    private func oneOf(_ key: String, _ text: String, _ allowed: [String]) throws(RPCError) -> String {
        guard allowed.contains(text) else {
            throw .invalidParams("\"\(key)\" must be one of \(allowed.map { "\"\($0)\"" }.joined(separator: ", "))", field: key)
        }
        return text
    }

    private func int(_ key: String, _ member: JSON, _ range: ClosedRange<Int>?) throws(RPCError) -> Int {
        guard let number = member.intValue else { throw mismatch(key, "an integer", member) }
        if let range, !range.contains(number) {
            throw .invalidParams("\"\(key)\" must be between \(range.lowerBound) and \(range.upperBound)", field: key)
        }
        return number
    }

    private func bool(_ key: String, _ member: JSON) throws(RPCError) -> Bool {
        guard case .bool(let flag) = member else { throw mismatch(key, "a boolean", member) }
        return flag
    }

    private func timestamp(_ key: String, _ text: String) throws(RPCError) -> Timestamp {
        guard let instant = Timestamp(iso8601: text) else {
            throw .invalidParams(
                "\"\(key)\" must be a real instant in ISO-8601, such as 2026-01-31T12:00:00Z (a day its month has, hours 00-23, minutes and seconds 00-59)",
                field: key)
        }
        return instant
    }

    private func array(_ key: String, _ member: JSON) throws(RPCError) -> [JSON] {
        guard case .array(let elements) = member else { throw mismatch(key, "an array", member) }
        return elements
    }

    private func object(_ key: String, _ member: JSON) throws(RPCError) -> JSONObject {
        guard case .object(let object) = member else { throw mismatch(key, "an object", member) }
        return object
    }
}
