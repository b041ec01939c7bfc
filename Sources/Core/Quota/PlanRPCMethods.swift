/// What the `plans.*` methods need of their context.
protocol PlanRPCContext: RPCContextProtocol {
    var plans: PlanCatalog { get }
}

extension RPCMethodRegistry where Context: PlanRPCContext {
    /// `plans.list` and `plans.publish`: the versioned plan contracts (SPEC §7). A new
    /// version applies to windows starting from its `effectiveAt`; running windows keep theirs.
    mutating func registerPlanMethods() {
        registerVersionedContractMethods("plans", what: "plan contract") { $0.plans }
    }
}
