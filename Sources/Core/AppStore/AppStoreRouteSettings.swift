/// What the App Store routes (the notification webhook and the app's posted transactions)
/// are built with.
struct AppStoreRouteSettings: Sendable {
    /// nil when `apple.trustedRootsFiles` or `apple.bundleId` is not configured (501).
    let verifier: AppleSignedDataVerifier?
    let catalog: ProductCatalog
    let idPattern: UserIdPattern
    let bindingPolicy: BillingConfiguration.Binding.Policy
}
