/// A JSON-RPC error object: what a handler throws to answer with `error` instead of `result`.
///
/// Handlers throw `RPCError` for anything the caller should see (invalid params, not found,
/// conflicts). Any other error a handler throws becomes `-32603 Internal error` with a
/// generic message, so database or C-library details never reach the socket; domain errors
/// that do have a caller-facing meaning opt in through `RPCErrorConvertible`.
struct RPCError: Error, Sendable, Equatable, CustomStringConvertible {
    /// -32768...-32000 are reserved by the specification; application codes live outside.
    var code: Int
    /// One short sentence, safe to show to the operator.
    var message: String
    /// Structured detail (e.g. the conflicting grant id); omitted from the reply when nil.
    var data: JSON?

    init(code: Int, message: String, data: JSON? = nil) {
        self.code = code
        self.message = message
        self.data = data
    }

    var description: String { "JSON-RPC error \(code): \(message)" }

    /// The error object as it appears in a response.
    var json: JSON {
        var object: JSONObject = ["code": .int(Int64(code)), "message": .string(message)]
        if let data { object["data"] = data }
        return .object(object)
    }
}

// MARK: - Codes

extension RPCError {
    /// The codes the JSON-RPC 2.0 specification defines, plus this server's own ones in the
    /// implementation-defined range -32000...-32099.
    enum Code {
        static let parseError = -32700
        static let invalidRequest = -32600
        static let methodNotFound = -32601
        static let invalidParams = -32602
        static let internalError = -32603
        /// The daemon refused the connection or message (too many connections, timeout).
        static let serverBusy = -32000
        static let timeout = -32001
        /// The connecting user may not use the admin socket (`admin.allowedUsers`).
        static let forbidden = -32003
        /// The database is unreachable or busy; the call changed nothing and can be retried.
        static let unavailable = -32002
        // Application errors (outside the reserved range) are added by features, from 1000 up.
    }
}

// MARK: - Standard errors

extension RPCError {
    /// -32700. The message is the specification's; `detail` (jansson's position and reason)
    /// goes to `data` so clients matching on the message keep working.
    static func parseError(detail: String? = nil) -> RPCError {
        RPCError(code: Code.parseError, message: "Parse error", data: detail.map(JSON.string))
    }

    /// -32600 with the specification's message and what exactly is wrong in `data`.
    static func invalidRequest(detail: String? = nil) -> RPCError {
        RPCError(code: Code.invalidRequest, message: "Invalid Request", data: detail.map(JSON.string))
    }

    /// -32600 for a message or batch over a configured limit: the message names the limit,
    /// since that is what the operator has to change.
    static func limitExceeded(_ message: String) -> RPCError {
        RPCError(code: Code.invalidRequest, message: message)
    }

    static let methodNotFound = RPCError(code: Code.methodNotFound, message: "Method not found")

    /// -32602 with a precise message, e.g. `Invalid params: "userId" must be a string, got number`,
    /// and `data: {"field": "userId"}` naming the offending parameter (a path such as
    /// `users[3].createdAt` for nested members) so scripts need not parse the message.
    static func invalidParams(_ reason: String, field: String? = nil) -> RPCError {
        RPCError(
            code: Code.invalidParams, message: "Invalid params: \(reason)",
            data: field.map { ["field": .string($0)] })
    }

    /// -32603. Deliberately says nothing about the cause; the server logs it instead.
    static let internalError = RPCError(code: Code.internalError, message: "Internal error")
}

/// An error type that knows its caller-facing JSON-RPC form (e.g. a domain "not found").
/// Errors that do not conform are reported as `RPCError.internalError`.
protocol RPCErrorConvertible: Error {
    var rpcError: RPCError { get }
}
