/// What the `offerings.*` methods need of their context.
protocol OfferingRPCContext: RPCContextProtocol {
    var offerings: OfferingCatalog { get }
}

extension RPCMethodRegistry where Context: OfferingRPCContext {
    /// `offerings.list` and `offerings.publish`: the versioned offerings contracts (SPEC §14).
    /// A new version is in force from its `effectiveAt`; ladder stages are kept (clamped to a
    /// shortened ladder).
    mutating func registerOfferingMethods() {
        registerVersionedContractMethods("offerings", what: "offerings contract") { $0.offerings }
    }
}
