/// One validated request or notification, as a handler sees it.
struct RPCRequest: Sendable {
    let method: String
    let params: RPCParams
    /// The `id` member exactly as received (string, number or null); nil for a notification,
    /// i.e. when the member is absent.
    let id: JSON?

    init(method: String, params: RPCParams = RPCParams(nil), id: JSON?) {
        self.method = method
        self.params = params
        self.id = id
    }

    /// No reply is sent for a notification, whatever its outcome.
    var isNotification: Bool { id == nil }
}

extension RPCRequest {
    /// Validates one element of a message against the Request object rules of the
    /// specification (section 4). The error case carries the id to answer with: the
    /// request's own id when it was readable, otherwise null.
    static func validate(_ value: JSON) -> Result<RPCRequest, InvalidRequest> {
        guard case .object(let object) = value else {
            return .failure(InvalidRequest(id: .null, detail: "a request must be an object, got \(value.typeName)"))
        }
        var id: JSON?
        switch object["id"] {
        case nil: id = nil
        case .string?, .int?, .double?, .null?: id = object["id"]
        case let other?:
            return .failure(InvalidRequest(id: .null, detail: "\"id\" must be a string, number or null, got \(other.typeName)"))
        }
        // From here on the id is known, so errors echo it (null when it was absent).
        let replyID = id ?? .null
        guard object["jsonrpc"] == "2.0" else {
            return .failure(InvalidRequest(id: replyID, detail: "\"jsonrpc\" must be exactly \"2.0\""))
        }
        guard let methodValue = object["method"] else {
            return .failure(InvalidRequest(id: replyID, detail: "\"method\" is required"))
        }
        guard case .string(let method) = methodValue else {
            return .failure(InvalidRequest(id: replyID, detail: "\"method\" must be a string, got \(methodValue.typeName)"))
        }
        switch object["params"] {
        case nil, .array?, .object?: break
        case let other?:
            return .failure(InvalidRequest(id: replyID, detail: "\"params\" must be an array or an object, got \(other.typeName)"))
        }
        return .success(RPCRequest(method: method, params: RPCParams(object["params"]), id: id))
    }

    struct InvalidRequest: Error {
        let id: JSON
        let detail: String
    }
}
