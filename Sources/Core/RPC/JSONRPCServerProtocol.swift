/// JSON-RPC 2.0 over whole messages: bytes in, bytes out, no I/O. The socket server feeds
/// it one line at a time; tests feed it the specification's examples.
///
/// Conformance notes (https://www.jsonrpc.org/specification):
/// - a batch is answered with an array in request order, notifications left out; a batch
///   of only notifications, or a single notification, is answered with nothing (`nil`);
/// - an empty batch is one Invalid Request error, not an array;
/// - `id` is echoed exactly (string, integer, real, null); an id of another type makes the
///   request invalid and the error carries id null, as does any error found before the id
///   could be read (parse errors, oversized messages);
/// - standard errors keep the specification's messages and put details in `data`.
struct JSONRPCServerProtocol<Context: RPCContextProtocol>: Sendable {
    let registry: RPCMethodRegistry<Context>
    let limits: RPCLimits
    /// Called with the method name and the error when a handler throws something that is
    /// neither an `RPCError` nor converts to one other than -32603: the caller only sees
    /// -32603, so this is where the cause gets logged.
    let onInternalError: @Sendable (_ method: String, _ error: any Error) -> Void

    init(
        registry: RPCMethodRegistry<Context>, limits: RPCLimits = .default,
        onInternalError: @escaping @Sendable (_ method: String, _ error: any Error) -> Void = { _, _ in }
    ) {
        self.registry = registry
        self.limits = limits
        self.onInternalError = onInternalError
    }

    /// Handles one message and returns the reply to send, or nil when there is nothing to
    /// send (notifications only).
    func handle(message: [UInt8], context: Context) -> [UInt8]? {
        handle(messageJSON: message, context: context)?.serialized()
    }

    /// Same as `handle(message:context:)` with the reply still as a value (for tests and for
    /// callers that post-process it).
    func handle(messageJSON message: [UInt8], context: Context) -> JSON? {
        guard message.count <= limits.maxMessageBytes else { return tooLargeReply() }
        let parsed: JSON
        do {
            parsed = try JSON.parse(message, limits: JSONLimits(maxBytes: limits.maxMessageBytes, maxDepth: limits.maxDepth))
        } catch {
            switch error.kind {
            case .syntax, .unsupported:
                return Self.errorResponse(.parseError(detail: error.description), id: .null)
            case .tooLarge:
                return tooLargeReply()
            case .tooDeep:
                return Self.errorResponse(.limitExceeded("Request nested too deeply: the limit is \(limits.maxDepth) levels"), id: .null)
            }
        }
        guard case .array(let batch) = parsed else {
            return handle(element: parsed, context: context)
        }
        guard !batch.isEmpty else {
            return Self.errorResponse(.invalidRequest(detail: "empty batch"), id: .null)
        }
        guard batch.count <= limits.maxBatchLength else {
            return Self.errorResponse(.limitExceeded("Batch too large: \(batch.count) requests, the limit is \(limits.maxBatchLength)"), id: .null)
        }
        let replies = batch.compactMap { handle(element: $0, context: context) }
        return replies.isEmpty ? nil : .array(replies)
    }

    /// The reply to a message over `limits.maxMessageBytes`; the socket server sends it
    /// before closing a connection whose line grew past the limit.
    func tooLargeReply() -> JSON {
        Self.errorResponse(.limitExceeded("Request too large: the limit is \(limits.maxMessageBytes) bytes"), id: .null)
    }

    /// An error response object (`{"jsonrpc":"2.0","error":{...},"id":...}`).
    static func errorResponse(_ error: RPCError, id: JSON) -> JSON {
        ["jsonrpc": "2.0", "error": error.json, "id": id]
    }

    static func resultResponse(_ result: JSON, id: JSON) -> JSON {
        ["jsonrpc": "2.0", "result": result, "id": id]
    }

    // MARK: One request

    private func handle(element: JSON, context: Context) -> JSON? {
        let request: RPCRequest
        switch RPCRequest.validate(element) {
        case .success(let valid): request = valid
        case .failure(let invalid): return Self.errorResponse(.invalidRequest(detail: invalid.detail), id: invalid.id)
        }
        let outcome = call(request, context: context)
        guard let id = request.id else { return nil }
        switch outcome {
        case .success(let result): return Self.resultResponse(result, id: id)
        case .failure(let error): return Self.errorResponse(error, id: id)
        }
    }

    private func call(_ request: RPCRequest, context: Context) -> Result<JSON, RPCError> {
        guard let method = registry.method(named: request.method) else { return .failure(.methodNotFound) }
        var context = context
        context.registry = registry
        do {
            return .success(try method.handler(request, context))
        } catch let error as RPCError {
            return .failure(error)
        } catch let error as any RPCErrorConvertible {
            let mapped = error.rpcError
            // A convertible error that still maps to -32603 (a database error that is not
            // "retry later") is as much a bug as any other: its cause is logged too.
            if mapped.code == RPCError.Code.internalError { onInternalError(request.method, error) }
            return .failure(mapped)
        } catch {
            onInternalError(request.method, error)
            return .failure(.internalError)
        }
    }
}
