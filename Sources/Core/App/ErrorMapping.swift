// How errors of the inner layers are answered at the two edges (HTTP and JSON-RPC). The
// only place where a database, payload or auth failure meets a status code.

extension DatabaseError: APIErrorConvertible, RPCErrorConvertible {
    /// Unreachable, or still locked after the bounded retries: retryable, so 503 (providers
    /// retry non-2xx). Anything else is a bug: the generic 500.
    var apiError: APIError? {
        if isUnavailable || isDeadlockOrLockWait { return .unavailable() }
        if isStatementTimeout { return .unavailable("the database did not answer in time, retry later", code: "timeout") }
        return nil
    }

    /// A statement stopped by its time limit is said to be one (-32001, `data.reason`
    /// `statement_timeout`), never "database unavailable": the database is up, the call was
    /// too heavy for the limit.
    var rpcError: RPCError {
        if isUnavailable || isDeadlockOrLockWait {
            return RPCError(code: RPCError.Code.unavailable, message: "database unavailable, retry later")
        }
        if isStatementTimeout {
            return RPCError(
                code: RPCError.Code.timeout,
                message: "a statement ran longer than database.readTimeoutSeconds allows and was stopped; nothing was changed by it: "
                    + "ask for less (a shorter period), or give billing-rpc a longer limit (BILLING__database__readTimeoutSeconds)",
                data: ["reason": "statement_timeout"])
        }
        return .internalError
    }
}

extension PayloadError: APIErrorConvertible {
    var apiError: APIError? {
        isTooLarge ? .payloadTooLarge(description, code: "payload_too_large") : .badRequest(description, code: "invalid_payload")
    }
}

extension AuthError: APIErrorConvertible {
    var apiError: APIError? { .unauthorized(description, code: reason.rawValue) }
}

extension BillingError: APIErrorConvertible, RPCErrorConvertible {
    /// The public routes: 404, 409 (`idempotency_conflict` for a key reused with other
    /// values, as `POST /billing/usage` has always answered), 503 when retryable.
    var apiError: APIError? {
        switch code {
        case .notFound: return .notFound(message)
        case .idempotencyMismatch: return .conflict(message, code: "idempotency_conflict")
        case .conflict: return .conflict(message)
        case .userDeleted: return .gone(message, code: "user_deleted")
        case .invalidParams: return .badRequest(message)
        case .databaseRequired, .unavailable: return .unavailable()
        }
    }

    /// The admin methods: application codes 1001–1004 with `data.reason`; -32002 when retryable.
    var rpcError: RPCError {
        if code == .invalidParams { return .invalidParams(message, field: data["field"]?.stringValue) }
        var data = self.data
        // A reason of its own (not_configured) is kept; otherwise the code's name.
        if data["reason"]?.stringValue == nil { data["reason"] = .string(code.name) }
        return RPCError(code: code.rawValue, message: message, data: .object(data))
    }
}
