/// `POST /api/v1/billing/webhooks/revenuecat` (SPEC §5, seeds/000).
///
/// The whole `Authorization` header must equal `revenuecat.webhookSecret` byte for byte
/// (compared in constant time; `previousWebhookSecret` too while rotating): no scheme
/// parsing. Unset secret → 501; mismatch → 401 with nothing written. The 200 is sent only
/// after the inbox row and its projection committed; a database outage is a 503, which
/// RevenueCat retries.
struct RevenueCatWebhook: Sendable {
    let settings: BillingConfiguration.RevenueCat
    let maxBodyBytes: Int
    let tiers: TierResolver
    let idPattern: UserIdPattern
    let metrics: BillingMetrics

    func handle(_ request: HTTPRequest, _ context: some DatabaseRequestContext) throws -> HTTPResponse {
        guard let secret = settings.webhookSecret, !secret.isEmpty else {
            throw APIError.notConfigured("the RevenueCat webhook is not configured (revenuecat.webhookSecret)")
        }
        let presented = request.headers["Authorization"] ?? ""
        // Both comparisons always run, so timing does not tell which secret matched.
        let current = constantTimeEquals(presented, secret)
        let previous = settings.previousWebhookSecret.map { !$0.isEmpty && constantTimeEquals(presented, $0) } ?? false
        guard current || previous else {
            context.logger.warning("webhook refused", ["webhook.provider": "revenuecat", "webhook.reason": "bad_secret"])
            metrics.webhook(.revenuecat, .rejected)
            throw APIError.unauthorized("the Authorization header does not match the configured webhook secret", code: "bad_secret")
        }

        let delivery: RevenueCatDelivery
        do {
            let body = try request.jsonBody(limits: JSONLimits(maxBytes: maxBodyBytes, maxDepth: 32), serializingMember: "event")
            delivery = try RevenueCatDelivery.decode(body.value, tiers: tiers, idPattern: idPattern, eventText: body.member)
        } catch {
            metrics.webhook(.revenuecat, .rejected)
            throw error
        }
        let outcome = try EventIngestion.deliver(
            EventIngestion.Delivery(event: delivery.event, payload: delivery.payload, candidates: delivery.userCandidates),
            now: context.clock.now(), on: try context.requireDatabase())
        let result = EventIngestion.metricsOutcome(outcome)
        metrics.webhook(.revenuecat, result)
        context.outcome = result.rawValue
        context.logger.info(
            "webhook ingested",
            [
                "webhook.provider": "revenuecat", "event.type": .string(delivery.event.rawType),
                "event.outcome": .string(outcome.duplicate ? "duplicate" : outcome.status?.rawValue ?? "unknown"),
                "event.id": outcome.eventId.map { .int(Int64($0)) } ?? .null,
            ])
        return .json(.ok, outcome.json)
    }
}
