/// The route table of `billing-fcgi`: every public route and the feature that answers it,
/// in one place, here in the composition root (the HTTP layer knows no feature).
enum BillingRoutes {
    static let prefix = "/api/v1"

    static func register(into router: inout Router<BillingRequestContext>) {
        router.get("\(prefix)/health") { request, context in HealthCheck.handle(request, context) }
        router.get("\(prefix)/ping") { request, context in HealthCheck.ping(request, context) }
        router.get("\(prefix)/billing/access") { request, context in try AccessRoute.handle(request, context) }
        router.post("\(prefix)/billing/webhooks/revenuecat") { request, context in try RevenueCatWebhook.handle(request, context) }
        router.post("\(prefix)/billing/usage") { request, context in try UsageRoute.handle(request, context) }
        router.get("\(prefix)/billing/plans") { request, context in try QuotaRoutes.plans(request, context) }
        router.post("\(prefix)/billing/webhooks/apple") { request, context in try AppleWebhook.handle(request, context) }
        router.post("\(prefix)/billing/apple/transactions") { request, context in try AppleTransactionRoute.handle(request, context) }
        router.post("\(prefix)/billing/paywall-events") { request, context in try PaywallEvents.handle(request, context) }
        router.get("\(prefix)/billing/offerings") { request, context in try OfferingsRoute.handle(request, context) }
    }

    /// A router with all routes registered.
    static func makeRouter() -> Router<BillingRequestContext> {
        var router = Router<BillingRequestContext>()
        register(into: &router)
        return router
    }
}
