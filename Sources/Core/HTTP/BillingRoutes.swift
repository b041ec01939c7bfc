/// Every public route of `billing-fcgi`, registered in one place so the executable only
/// wires and tests can build the same router.
public enum BillingRoutes {
    public static let prefix = "/api/v1"

    public static func register(into router: inout Router) {
        router.get("\(prefix)/health", HealthCheck.handle)
        router.get("\(prefix)/ping", HealthCheck.ping)
        router.get("\(prefix)/billing/access", AccessRoute.handle)
        router.post("\(prefix)/billing/webhooks/revenuecat", RevenueCatWebhook.handle)
        router.post("\(prefix)/billing/usage", QuotaRoutes.usage)
        router.get("\(prefix)/billing/plans", QuotaRoutes.plans)
        router.post("\(prefix)/billing/webhooks/apple", AppleWebhook.handle)
        router.post("\(prefix)/billing/apple/transactions", AppleTransactionRoute.handle)
        router.post("\(prefix)/billing/paywall-events", PaywallEvents.handle)
    }

    /// A router with all routes registered.
    public static func makeRouter() -> Router {
        var router = Router()
        register(into: &router)
        return router
    }
}
