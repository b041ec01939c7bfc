// How errors of the inner layers are answered at the two edges (HTTP and JSON-RPC). The
// only place where a database, payload or auth failure meets a status code.

extension DatabaseError: APIErrorConvertible, RPCErrorConvertible {
    /// Unreachable, or still locked after the bounded retries: retryable, so 503 (providers
    /// retry non-2xx). Anything else is a bug: the generic 500.
    public var apiError: APIError? {
        if isUnavailable || isDeadlockOrLockWait { return .unavailable() }
        return nil
    }

    public var rpcError: RPCError {
        if isUnavailable || isDeadlockOrLockWait {
            return RPCError(code: RPCError.Code.unavailable, message: "database unavailable, retry later")
        }
        return .internalError
    }
}

extension PayloadError: APIErrorConvertible {
    public var apiError: APIError? { .badRequest(description, code: "invalid_payload") }
}

extension AuthError: APIErrorConvertible {
    public var apiError: APIError? { .unauthorized(description, code: reason.rawValue) }
}
