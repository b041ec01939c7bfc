/// The call context of `billing-rpc`: one per connection, built on that connection's thread
/// (its database connection stays there). The one type that knows every admin feature's
/// context protocol, answering each from `BillingServices`.
struct AdminRPCContext: RPCContextProtocol, AccessRPCContext, EventRPCContext, StatsRPCContext, UserRPCContext,
    GrantRPCContext, GrandfatherRPCContext, PlanRPCContext, OfferingRPCContext, SystemRPCContext, ReconcileRPCContext
{
    var clock: any BillingClock
    var peer: RPCPeer?
    var server: RPCServerInfo
    var databaseStatus: () -> JSON
    let services: BillingServices
    var database: DatabaseConnection?
    var registry = RPCMethodRegistry<AdminRPCContext>()

    init(
        clock: (any BillingClock)? = nil, peer: RPCPeer? = nil, server: RPCServerInfo = RPCServerInfo(),
        databaseStatus: (() -> JSON)? = nil, services: BillingServices = .unconfigured(),
        database: DatabaseConnection? = nil
    ) {
        self.clock = clock ?? services.clock
        self.peer = peer
        self.server = server
        self.databaseStatus = databaseStatus ?? AdminRPCContext.probe(database)
        self.services = services
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

    func overlayDetails(userId: String, now: Timestamp, on db: DatabaseConnection) throws -> (grants: [JSON], campaigns: [JSON]) {
        (try GrantStore.list(userId: userId, on: db).map { $0.json(at: now) }, try Grandfather.memberships(userId: userId, now: now, on: db))
    }

    var idPattern: UserIdPattern { services.idPattern }
    var catalog: ProductCatalog { services.catalog }
    var plans: PlanCatalog { services.plans }
    var offerings: OfferingCatalog { services.offerings }
    var flags: FlagCache { services.flags }
    var reportingCurrency: String { services.configuration.reporting.currency }
    var bindingPolicy: BillingConfiguration.Binding.Policy { services.configuration.binding.policy }
    var reconcile: ReconcileService? { services.reconcile }
    var metricsDirectory: MetricsDirectory { MetricsDirectory.of(services.configuration) }
}
