/// A handler: reads its params, does the work, returns the `result`. Thrown `RPCError`s
/// (and `RPCErrorConvertible`s) become the error object; anything else is reported as
/// -32603 without details.
typealias RPCHandler<Context> = @Sendable (RPCRequest, Context) throws -> JSON

/// One registered method, with the help text `system.listMethods` and the CLI print.
struct RPCMethod<Context>: Sendable {
    let name: String
    /// One line: what the method does.
    let summary: String
    /// The params, e.g. `{userId: string, tier: "plus"|"pro", expiresAt?: ISO-8601}`.
    let paramsHelp: String
    let handler: RPCHandler<Context>
}

/// Method name → handler, generic over the application's context. Each feature registers
/// its methods in its own `<Feature>RPCMethods.swift`, handed what they need of the process
/// (the handlers capture it); the context gives the call's own state (clock, peer, the
/// connection's database). The application's table calls them all:
/// ```swift
/// extension RPCMethodRegistry where Context: RPCContextProtocol {
///     mutating func registerGrantMethods(idPattern: UserIdPattern) {
///         register("grants.create", summary: "Grant a tier to a user",
///                  params: "{userId, tier, expiresAt?, reason, actor}") { request, context in ... }
///     }
/// }
/// ```
/// Built once at start-up, then shared read-only by every connection thread.
struct RPCMethodRegistry<Context>: Sendable {
    private var methodsByName: [String: RPCMethod<Context>] = [:]

    init() {}

    /// Registering a name twice, or a name starting with `rpc.` (reserved by the
    /// specification), is a programming error.
    mutating func register(
        _ name: String, summary: String, params: String = "none",
        handler: @escaping RPCHandler<Context>
    ) {
        precondition(!name.isEmpty && !name.hasPrefix("rpc."), "invalid JSON-RPC method name \(name)")
        precondition(methodsByName[name] == nil, "JSON-RPC method \(name) registered twice")
        methodsByName[name] = RPCMethod(name: name, summary: summary, paramsHelp: params, handler: handler)
    }

    func method(named name: String) -> RPCMethod<Context>? { methodsByName[name] }

    /// All methods sorted by name.
    var methods: [RPCMethod<Context>] { methodsByName.values.sorted { $0.name < $1.name } }
}
