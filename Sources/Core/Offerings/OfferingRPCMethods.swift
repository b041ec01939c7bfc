extension RPCMethodRegistry where Context: RPCContextProtocol {
    /// `offerings.list` and `offerings.publish`: the versioned offerings contracts (SPEC §14).
    /// A new version is in force from its `effectiveAt`; ladder stages are kept (clamped to a
    /// shortened ladder).
    mutating func registerOfferingMethods(offerings: OfferingCatalog) {
        registerVersionedContractMethods("offerings", what: "offerings contract", versions: offerings)
    }
}
