/// `POST /api/v1/billing/webhooks/apple` `{"signedPayload": ...}` (App Store Server
/// Notifications V2, SPEC §5).
///
/// Verified (outer and nested JWS), deduplicated by `notificationUUID` (the inbox's unique
/// key: a duplicate answers 200 `{duplicate: true}`), normalized, folded and committed
/// before the 200; 503 only when the database is unavailable (Apple retries).
///
/// Refusals, in two kinds (docs/appstore.md):
/// - not even `{"signedPayload": "<compact JWS>"}` — not JSON, no non-empty string
///   `signedPayload` (400), a JWS longer than any App Store data (413), not three non-empty
///   base64url segments with JSON-object header and payload (422 `malformed_jws`): answered,
///   logged, counted, and **not** quarantined. The route is unauthenticated, so storing such
///   bodies would let anyone fill the bounded quarantine, and no trust fix can make one verify.
/// - a well-formed JWS that fails verification (chain, signature, bundle, environment, ...):
///   422 with the reason, and quarantined for a re-run after a trust fix.
enum AppleWebhook {
    static func handle(_ request: HTTPRequest, _ context: some AppStoreRouteContext) throws -> HTTPResponse {
        guard let verifier = context.appleVerifier else {
            throw APIError.notConfigured("App Store notifications are not configured (apple.trustedRootsFiles, apple.bundleId)")
        }
        let db = try context.requireDatabase()
        let now = context.clock.now()
        let signedPayload: String
        do {
            signedPayload = try self.signedPayload(body: request.body)
        } catch {
            throw refused(error, quarantined: nil, context)
        }
        let delivery: AppleDelivery
        do {
            delivery = try AppleDelivery.notification(signedPayload: signedPayload, verifier: verifier, catalog: context.catalog.products,
                                                      idPattern: context.idPattern, now: now)
        } catch {
            let quarantined = try AppleQuarantine.record(provider: .appleNotification, body: request.body,
                                                         error: verificationError(error), now: now, on: db)
            throw refused(error, quarantined: quarantined, context)
        }
        let outcome = try AppleIngestion.ingest(delivery, policy: context.bindingPolicy, now: now, on: db)
        let result = EventIngestion.metricsOutcome(outcome)
        context.metrics.webhook(.apple, result)
        context.outcome = result.rawValue
        context.logger.info("webhook ingested", [
            "webhook.provider": "apple", "event.type": .string(delivery.event.rawType),
            "event.outcome": .string(outcome.duplicate ? "duplicate" : outcome.status?.rawValue ?? "unknown"),
            "event.id": outcome.eventId.map { .int(Int64($0)) } ?? .null,
        ])
        return .json(.ok, outcome.json)
    }

    /// Body → verified delivery. Throws `AppleVerificationError`, `PayloadError`, `JSONError`
    /// (413 for a signed payload over the App Store bound).
    static func decode(body: [UInt8], verifier: AppleSignedDataVerifier, catalog: AppleDelivery.Catalog,
                              idPattern: UserIdPattern, now: Timestamp) throws -> AppleDelivery {
        try AppleDelivery.notification(signedPayload: try signedPayload(body: body), verifier: verifier, catalog: catalog,
                                       idPattern: idPattern, now: now)
    }

    /// The `signedPayload` of a body shaped like a notification: a JSON object whose
    /// `signedPayload` is a non-empty string (else `JSONError`/`PayloadError`, 400) of at most
    /// the App Store bound (else `PayloadError`, 413) holding a compact JWS (else
    /// `AppleVerificationError(.malformed)`, 422). Nothing is verified yet.
    static func signedPayload(body: [UInt8]) throws -> String {
        let json = try JSON.parse(body, limits: JSONLimits(maxBytes: 1 << 20, maxDepth: 8))
        let signedPayload = try AppleSignedDataVerifier.signedData(json, field: "signedPayload")
        _ = try AppleSignedDataVerifier.compactJWS(signedPayload)
        return signedPayload
    }

    /// What a refused delivery is recorded as: its verification error, or `malformed_jws`
    /// with the payload error's message (a verified notification missing a required field).
    private static func verificationError(_ error: any Error) -> AppleVerificationError {
        (error as? AppleVerificationError) ?? AppleVerificationError(.malformed, "not a notification payload")
    }

    /// Logs and counts a refusal (`quarantined`: its quarantine row, nil when none was
    /// written) and returns the error to answer: 422 with the reason for a verification
    /// error, else the error itself (400, 413).
    private static func refused(_ error: any Error, quarantined: UInt64?, _ context: some AppStoreRouteContext) -> any Error {
        let reason = verificationError(error).reason
        context.logger.warning("webhook refused", ["webhook.provider": "apple", "webhook.reason": .string(reason.rawValue),
                                                   "quarantine.id": quarantined.map { .int(Int64($0)) } ?? .null])
        context.metrics.webhook(.apple, quarantined == nil ? .rejected : .quarantined)
        context.outcome = quarantined == nil ? "rejected" : "quarantined"
        if error is AppleVerificationError {
            return APIError.unprocessable("the signed payload was refused: \(reason.rawValue)", code: reason.rawValue)
        }
        return error
    }
}
