/// A handler: reads its params, does the work, returns the `result`. Thrown `RPCError`s
/// (and `RPCErrorConvertible`s) become the error object; anything else is reported as
/// -32603 without details.
public typealias RPCHandler = @Sendable (RPCRequest, RPCContext) throws -> JSON

/// One registered method, with the help text `system.listMethods` and the CLI print.
public struct RPCMethod: Sendable {
    public let name: String
    /// One line: what the method does.
    public let summary: String
    /// The params, e.g. `{userId: string, tier: "plus"|"pro", expiresAt?: ISO-8601}`.
    public let paramsHelp: String
    public let handler: RPCHandler
}

/// Method name → handler. Features register their methods in their own files:
/// ```swift
/// extension RPCMethodRegistry {
///     public mutating func registerGrantMethods() {
///         register("grants.create", summary: "Grant a tier to a user",
///                  params: "{userId, tier, expiresAt?, reason, actor}") { request, context in ... }
///     }
/// }
/// ```
/// Built once at start-up, then shared read-only by every connection thread.
public struct RPCMethodRegistry: Sendable {
    private var methodsByName: [String: RPCMethod] = [:]

    public init() {}

    /// Registering a name twice, or a name starting with `rpc.` (reserved by the
    /// specification), is a programming error.
    public mutating func register(_ name: String, summary: String, params: String = "none",
                                  handler: @escaping RPCHandler) {
        precondition(!name.isEmpty && !name.hasPrefix("rpc."), "invalid JSON-RPC method name \(name)")
        precondition(methodsByName[name] == nil, "JSON-RPC method \(name) registered twice")
        methodsByName[name] = RPCMethod(name: name, summary: summary, paramsHelp: params, handler: handler)
    }

    public func method(named name: String) -> RPCMethod? { methodsByName[name] }

    /// All methods sorted by name.
    public var methods: [RPCMethod] { methodsByName.values.sorted { $0.name < $1.name } }
}
