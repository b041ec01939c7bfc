/// What the domain refuses, as a domain type: thrown by the stores and services (grants,
/// grandfathering, users, events, quotas), never a transport error. The edges map it in one
/// place (`App/ErrorMapping.swift`): to the admin JSON-RPC application codes below (SPEC §8;
/// standard codes -32700...-32603 and the server's own -32000...-32002 live in
/// `RPCError.Code`), and to an HTTP status for the public routes.
///
/// | code | name                  | meaning                                                        |
/// |------|-----------------------|----------------------------------------------------------------|
/// | 1001 | not_found             | the user, grant or campaign named does not exist               |
/// | 1002 | idempotency_mismatch  | the idempotency key was used before with other params; nothing written |
/// | 1003 | conflict              | the request contradicts the stored state (e.g. a campaign's tier, an ended campaign) |
/// | 1004 | database_required     | the daemon runs without a database                            |
/// | 1005 | user_deleted          | the user was erased by users.delete (HTTP 410, SPEC §19)       |
///
/// Every application error carries `data` with at least `{"reason": "<name>"}`.
struct BillingError: Error, Sendable, Equatable {
    enum Code: Int, Sendable, CaseIterable {
        case notFound = 1001
        case idempotencyMismatch = 1002
        case conflict = 1003
        case databaseRequired = 1004
        case userDeleted = 1005
        /// A value that contradicts another (e.g. an end before its start).
        case invalidParams = -32602
        /// The database cannot serve right now (a retryable condition: HTTP 503).
        case unavailable = -32002

        var name: String {
            switch self {
            case .notFound: return "not_found"
            case .idempotencyMismatch: return "idempotency_mismatch"
            case .conflict: return "conflict"
            case .databaseRequired: return "database_required"
            case .userDeleted: return "user_deleted"
            case .unavailable: return "unavailable"
            case .invalidParams: return "invalid_params"
            }
        }
    }

    var code: Code
    var message: String
    var data: JSONObject

    init(_ code: Code, _ message: String, data: JSONObject = [:]) {
        self.code = code
        self.message = message
        self.data = data
    }

    static func userDeleted(_ userId: String) -> BillingError {
        BillingError(.userDeleted, "the user was deleted", data: ["userId": .string(userId)])
    }

    static func notFound(_ what: String, _ fields: JSONObject) -> BillingError {
        BillingError(.notFound, "\(what) not found", data: fields)
    }
}
