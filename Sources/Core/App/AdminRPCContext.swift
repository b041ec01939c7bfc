/// The call context of `billing-rpc`: one per connection, built on that connection's thread
/// (its database connection stays there), carrying the connection's own state: the clock,
/// the peer, its database connection and its probe. What the features' methods need of the
/// process they are registered with (`BillingRPCMethods`).
struct AdminRPCContext: RPCContextProtocol, SystemRPCContext {
    var clock: any BillingClock
    var peer: RPCPeer?
    var databaseStatus: () -> JSON
    var database: DatabaseConnection?
    var registry = RPCMethodRegistry<AdminRPCContext>()

    init(
        clock: any BillingClock = SystemClock(), peer: RPCPeer? = nil, databaseStatus: (() -> JSON)? = nil,
        database: DatabaseConnection? = nil
    ) {
        self.clock = clock
        self.peer = peer
        self.databaseStatus = databaseStatus ?? AdminRPCContext.probe(database)
        self.database = database
    }

    /// `{status: ok|down}` from a ping of `database`, or "not configured" without one.
    static func probe(_ database: DatabaseConnection?) -> () -> JSON {
        guard let database else { return { ["status": "not configured"] } }
        return {
            let started = monotonicMilliseconds()
            do {
                try database.ping()
                return ["status": "ok", "latencyMs": .int(monotonicMilliseconds() - started)]
            } catch {
                return ["status": "down"]
            }
        }
    }
}
