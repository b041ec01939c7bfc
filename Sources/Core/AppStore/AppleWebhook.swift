/// `POST /api/v1/billing/webhooks/apple` `{"signedPayload": ...}` (App Store Server
/// Notifications V2, SPEC §5).
///
/// Verified (outer and nested JWS), deduplicated by `notificationUUID` (the inbox's unique
/// key: a duplicate answers 200 `{duplicate: true}`), normalized, folded and committed
/// before the 200. A delivery that fails verification answers 422 with the reason (400
/// when it is not even a `{signedPayload}` body, 413 when the JWS is longer than any App
/// Store data) and is quarantined for a re-run after a trust fix; 503 only when the
/// database is unavailable (Apple retries).
public enum AppleWebhook {
    public static func handle(_ request: HTTPRequest, _ context: RequestContext) throws -> HTTPResponse {
        guard let verifier = context.services.appleVerifier else {
            throw APIError.notConfigured("App Store notifications are not configured (apple.trustedRootsFiles, apple.bundleId)")
        }
        let db = try context.requireDatabase()
        let now = context.clock.now()
        let configuration = context.services.configuration
        let delivery: AppleDelivery
        do {
            delivery = try decode(body: request.body, verifier: verifier, catalog: configuration.products,
                                  idPattern: context.services.idPattern, now: now)
        } catch {
            let refusal = (error as? AppleVerificationError)
                ?? AppleVerificationError(.malformed, (error as? APIError)?.message ?? "not a {signedPayload} body")
            let quarantined = try AppleQuarantine.record(provider: .appleNotification, body: request.body, error: refusal, now: now, on: db)
            context.logger.warning("webhook refused", ["webhook.provider": "apple", "webhook.reason": .string(refusal.reason.rawValue),
                                                       "quarantine.id": quarantined.map { .int(Int64($0)) } ?? .null])
            BillingMetrics.shared.webhook(.apple, quarantined == nil ? .rejected : .quarantined)
            context.outcome = quarantined == nil ? "rejected" : "quarantined"
            if error is AppleVerificationError {
                throw APIError.unprocessable("the signed payload was refused: \(refusal.reason.rawValue)", code: refusal.reason.rawValue)
            }
            throw error
        }
        let outcome = try AppleIngestion.ingest(delivery, policy: configuration.binding.policy, now: now, on: db)
        let result = EventIngestion.metricsOutcome(outcome)
        BillingMetrics.shared.webhook(.apple, result)
        context.outcome = result.rawValue
        context.logger.info("webhook ingested", [
            "webhook.provider": "apple", "event.type": .string(delivery.event.rawType),
            "event.outcome": .string(outcome.duplicate ? "duplicate" : outcome.status?.rawValue ?? "unknown"),
            "event.id": outcome.eventId.map { .int(Int64($0)) } ?? .null,
        ])
        return .json(.ok, outcome.json)
    }

    /// Body → verified delivery. Throws `AppleVerificationError`, `PayloadError`, `JSONError`
    /// or `APIError` (413 for a signed payload over the App Store bound).
    public static func decode(body: [UInt8], verifier: AppleSignedDataVerifier, catalog: AppleDelivery.Catalog,
                              idPattern: UserIdPattern, now: Timestamp) throws -> AppleDelivery {
        let json = try JSON.parse(body, limits: JSONLimits(maxBytes: 1 << 20, maxDepth: 8))
        let signedPayload = try AppleSignedDataVerifier.signedData(json, field: "signedPayload")
        return try AppleDelivery.notification(signedPayload: signedPayload, verifier: verifier, catalog: catalog,
                                              idPattern: idPattern, now: now)
    }
}
