/// The application error codes of the admin JSON-RPC methods, all in one place (SPEC §8).
/// Standard codes (-32700...-32603) and the server's own (-32000...-32002) live in
/// `RPCError.Code`; invalid params are -32602 with `data.field` naming the parameter.
///
/// | code | name                  | meaning                                                        |
/// |------|-----------------------|----------------------------------------------------------------|
/// | 1001 | not_found             | the user, grant or campaign named does not exist               |
/// | 1002 | idempotency_mismatch  | the idempotency key was used before with other params; nothing written |
/// | 1003 | conflict              | the request contradicts the stored state (e.g. a campaign's tier, an ended campaign) |
/// | 1004 | database_required     | the daemon runs without a database                            |
///
/// Every application error carries `data` with at least `{"reason": "<name>"}`.
public struct AdminError: Error, Sendable, Equatable, RPCErrorConvertible {
    public enum Code: Int, Sendable, CaseIterable {
        case notFound = 1001
        case idempotencyMismatch = 1002
        case conflict = 1003
        case databaseRequired = 1004

        public var name: String {
            switch self {
            case .notFound: return "not_found"
            case .idempotencyMismatch: return "idempotency_mismatch"
            case .conflict: return "conflict"
            case .databaseRequired: return "database_required"
            }
        }
    }

    public var code: Code
    public var message: String
    public var data: JSONObject

    public init(_ code: Code, _ message: String, data: JSONObject = [:]) {
        self.code = code
        self.message = message
        self.data = data
    }

    public static func notFound(_ what: String, _ fields: JSONObject) -> AdminError {
        AdminError(.notFound, "\(what) not found", data: fields)
    }

    public var rpcError: RPCError {
        var data = self.data
        data["reason"] = .string(code.name)
        return RPCError(code: code.rawValue, message: message, data: .object(data))
    }
}

extension RPCContext {
    /// This connection's database, or error 1004 when the daemon was started without one.
    public func requireDatabase() throws(AdminError) -> DatabaseConnection {
        guard let database else { throw AdminError(.databaseRequired, "billing-rpc runs without a database (start it with --config)") }
        return database
    }
}

extension RPCParams {
    /// The operator named by a mutation: a non-empty string of at most 128 characters.
    public func requireActor() throws(RPCError) -> String {
        let actor = try requireString("actor", maxLength: 128)
        guard !actor.allSatisfy(\.isWhitespace) else {
            throw .invalidParams("\"actor\" must not be empty", field: "actor")
        }
        return actor
    }

    /// A non-empty string (e.g. a reason or a campaign name).
    public func requireNonEmptyString(_ key: String, maxLength: Int) throws(RPCError) -> String {
        let text = try requireString(key, maxLength: maxLength)
        guard !text.allSatisfy(\.isWhitespace) else {
            throw .invalidParams("\"\(key)\" must not be empty", field: key)
        }
        return text
    }

    /// A user id that matches `users.idPattern`.
    public func requireUserId(_ key: String = "userId", pattern: UserIdPattern) throws(RPCError) -> String {
        let id = try requireString(key, maxLength: 128)
        guard pattern.matches(id) else {
            throw .invalidParams("\"\(key)\" does not match users.idPattern", field: key)
        }
        return id
    }

    /// A paid tier: `plus` or `pro`.
    public func requireTier(_ key: String = "tier") throws(RPCError) -> Tier {
        Tier(rawValue: try requireString(key, oneOf: ["plus", "pro"]))!
    }
}
