/// What the App Store routes (the notification webhook and the app's posted transactions)
/// need of their request context.
protocol AppStoreRouteContext: DatabaseRequestContext {
    /// nil when `apple.trustedRootsFiles` or `apple.bundleId` is not configured (501).
    var appleVerifier: AppleSignedDataVerifier? { get }
    var catalog: ProductCatalog { get }
    var idPattern: UserIdPattern { get }
    var bindingPolicy: BillingConfiguration.Binding.Policy { get }
    var maxBodyBytes: Int { get }
    var metrics: BillingMetrics { get }
}
