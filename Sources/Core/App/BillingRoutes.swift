/// The route table of `billing-fcgi`: every public route and the feature that answers it,
/// in one place, here in the composition root (the HTTP layer knows no feature). Each
/// feature's route is built once, here, holding what it needs of the process's services;
/// the per-thread context carries only the request's own state (its database connection,
/// clock, logger, signed-in user).
enum BillingRoutes {
    static let prefix = "/api/v1"

    static func register(into router: inout Router<BillingRequestContext>, services: BillingServices) {
        let health = HealthCheck(metrics: services.metrics)
        let access = AccessRoute(services)
        let usage = UsageRoute(plans: services.plans, flags: services.flags, metrics: services.metrics)
        let plans = PlansRoute(plans: services.plans)
        let revenuecat = RevenueCatWebhook(services)
        let appStore = AppStoreRouteSettings(
            verifier: services.appleVerifier, catalog: services.catalog, idPattern: services.idPattern,
            bindingPolicy: services.configuration.binding.policy)
        let apple = AppleWebhook(appStore: appStore, metrics: services.metrics)
        let transactions = AppleTransactionRoute(
            appStore: appStore, maxBodyBytes: services.configuration.server.maxBodyBytes, access: access)
        let paywall = PaywallEvents(offerings: services.offerings, purgeSchedule: services.paywallPurge)
        let changes = LiveChangesRoute(live: services.configuration.live)
        let offerings = OfferingsRoute(offerings: services.offerings, catalog: services.catalog, tiers: services.tiers)
        let keys = SigningKeysRoute(signer: services.entitlementTokens)
        let offerSignatures = AppleOfferSignatureRoute(signer: services.offerSigner, offerings: services.offerings, metrics: services.metrics)
        let play = services.googlePlayIngestion
        let google = GooglePlayWebhook(
            verifier: services.googlePush, ingestion: play, maxBodyBytes: services.configuration.server.maxBodyBytes,
            metrics: services.metrics)
        let playPurchases = GooglePlayPurchaseRoute(
            ingestion: play, maxBodyBytes: services.configuration.server.maxBodyBytes, access: access, catalog: services.catalog)

        router.get("\(prefix)/health") { request, context in health.handle(request, context) }
        router.get("\(prefix)/ping") { request, context in HealthCheck.ping(request, context) }
        router.get("\(prefix)/billing/access") { request, context in try access.handle(request, context) }
        router.get("\(prefix)/billing/access/changes") { request, context in try changes.handle(request, context) }
        router.post("\(prefix)/billing/webhooks/revenuecat") { request, context in try revenuecat.handle(request, context) }
        router.post("\(prefix)/billing/usage") { request, context in try usage.handle(request, context) }
        router.get("\(prefix)/billing/plans") { request, context in try plans.handle(request, context) }
        router.post("\(prefix)/billing/webhooks/apple") { request, context in try apple.handle(request, context) }
        router.post("\(prefix)/billing/apple/transactions") { request, context in try transactions.handle(request, context) }
        router.post("\(prefix)/billing/paywall-events") { request, context in try paywall.handle(request, context) }
        router.get("\(prefix)/billing/offerings") { request, context in try offerings.handle(request, context) }
        router.get("\(prefix)/billing/keys") { request, context in try keys.handle(request, context) }
        router.post("\(prefix)/billing/apple/offer-signatures") { request, context in try offerSignatures.handle(request, context) }
        router.post("\(prefix)/billing/webhooks/google") { request, context in try google.handle(request, context) }
        router.post("\(prefix)/billing/google/purchases") { request, context in try playPurchases.handle(request, context) }
    }

    /// A router with all routes registered, answering from `services`.
    static func makeRouter(services: BillingServices = .unconfigured()) -> Router<BillingRequestContext> {
        var router = Router<BillingRequestContext>()
        register(into: &router, services: services)
        return router
    }
}

extension AccessRoute {
    /// The access route of a process: the one snapshot reader every route that answers a
    /// snapshot goes through.
    init(_ services: BillingServices) {
        self.init(
            catalog: services.catalog, snapshots: services.snapshots, plans: services.plans, flags: services.flags,
            metrics: services.metrics, activity: services.activity, tokens: services.entitlementTokens)
    }
}

extension RevenueCatWebhook {
    init(_ services: BillingServices) {
        self.init(
            settings: services.configuration.revenuecat, maxBodyBytes: services.configuration.server.maxBodyBytes,
            tiers: services.tiers, idPattern: services.idPattern, metrics: services.metrics)
    }
}
