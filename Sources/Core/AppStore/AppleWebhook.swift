/// `POST /api/v1/billing/webhooks/apple` `{"signedPayload": ...}` (App Store Server
/// Notifications V2, SPEC §5).
///
/// Verified (outer and nested JWS), deduplicated by `notificationUUID` (the inbox's unique
/// key: a duplicate answers 200 `{duplicate: true}`), normalized, folded and committed
/// before the 200; 503 only when the database is unavailable (Apple retries).
///
/// Refusals (docs/appstore.md): anything that does not verify — not even a compact JWS
/// (400/413/422 `malformed_jws`), a chain not rooted in a configured root, a bad signature,
/// a wrong algorithm or key — is answered with its precise 4xx, logged and counted
/// (`outcome="rejected"`), and **never stored**: the route is public, and no setting can make
/// such a delivery verify. A delivery whose signature verified but that fails one of this
/// server's settings (bundle id, app id, environment) is answered 422 with the reason and kept
/// in the quarantine (its `signedPayload` only, one row per `notificationUUID`), to be re-run
/// with `events.retryQuarantined` once the setting is fixed; a TEST notification is not kept
/// (nothing to re-run). Apple-signed data that is no notification (a transaction or renewal
/// info) is 400 `not_a_notification`, never stored. JWS segments are canonical base64url
/// only, so one signed payload has one spelling (SPEC §19).
struct AppleWebhook: Sendable {
    let appStore: AppStoreRouteSettings
    let metrics: BillingMetrics

    func handle(_ request: HTTPRequest, _ context: some DatabaseRequestContext) throws -> HTTPResponse {
        guard let verifier = appStore.verifier else {
            throw APIError.notConfigured("App Store notifications are not configured (apple.trustedRootsFiles, apple.bundleId)")
        }
        let db = try context.requireDatabase()
        let now = context.clock.now()
        let signedPayload: String
        do {
            signedPayload = try Self.signedPayload(body: request.body)
        } catch {
            throw refused(error, quarantined: nil, context)
        }
        let delivery: AppleDelivery
        do {
            delivery = try AppleDelivery.notification(
                signedPayload: signedPayload, verifier: verifier, catalog: appStore.catalog.products,
                idPattern: appStore.idPattern, now: now)
        } catch let error as AppleVerificationError where error.isSettingMismatch && error.notificationType != "TEST" {
            // Signed by Apple, refused by one of our settings: kept for a re-run once it is
            // fixed (a TEST notification has nothing to re-run: refused, not stored).
            let quarantined = try AppleQuarantine.record(
                provider: .appleNotification, signedPayload: signedPayload,
                error: error, now: now, on: db)
            throw refused(error, quarantined: quarantined, context)
        } catch {
            // Does not verify (or verified data that can never apply): refused, never stored.
            throw refused(error, quarantined: nil, context)
        }
        let outcome = try AppleIngestion.ingest(delivery, policy: appStore.bindingPolicy, now: now, on: db)
        let result = EventIngestion.metricsOutcome(outcome)
        metrics.webhook(.apple, result)
        context.outcome = result.rawValue
        context.logger.info(
            "webhook ingested",
            [
                "webhook.provider": "apple", "event.type": .string(delivery.event.rawType),
                "event.outcome": .string(outcome.duplicate ? "duplicate" : outcome.status?.rawValue ?? "unknown"),
                "event.id": outcome.eventId.map { .int(Int64($0)) } ?? .null,
            ])
        return .json(.ok, outcome.json)
    }

    /// Body → verified delivery. Throws `AppleVerificationError`, `PayloadError`, `JSONError`
    /// (413 for a signed payload over the App Store bound).
    static func decode(
        body: [UInt8], verifier: AppleSignedDataVerifier, catalog: AppleDelivery.Catalog,
        idPattern: UserIdPattern, now: Timestamp
    ) throws -> AppleDelivery {
        try AppleDelivery.notification(
            signedPayload: try signedPayload(body: body), verifier: verifier, catalog: catalog,
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
    private func refused(_ error: any Error, quarantined: UInt64?, _ context: some DatabaseRequestContext) -> any Error {
        let reason = Self.verificationError(error).reason
        context.logger.warning(
            "webhook refused",
            [
                "webhook.provider": "apple", "webhook.reason": .string(reason.rawValue),
                "quarantine.id": quarantined.map { .int(Int64($0)) } ?? .null,
            ])
        metrics.webhook(.apple, quarantined == nil ? .rejected : .quarantined)
        context.outcome = quarantined == nil ? "rejected" : "quarantined"
        if let error = error as? AppleVerificationError, error.reason == .notANotification {
            return APIError.badRequest("the signed payload is not a notification", code: reason.rawValue)
        }
        if error is AppleVerificationError {
            return APIError.unprocessable("the signed payload was refused: \(reason.rawValue)", code: reason.rawValue)
        }
        return error
    }
}
