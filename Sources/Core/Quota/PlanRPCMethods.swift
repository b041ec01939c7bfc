extension RPCMethodRegistry where Context: RPCContextProtocol {
    /// `plans.list` and `plans.publish`: the versioned plan contracts (SPEC §7). A new
    /// version applies to windows starting from its `effectiveAt`; running windows keep theirs.
    mutating func registerPlanMethods(plans: PlanCatalog) {
        registerVersionedContractMethods("plans", what: "plan contract", versions: plans)
    }
}
