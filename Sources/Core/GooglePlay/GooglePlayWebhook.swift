/// Who may push Real-Time Developer Notifications (SPEC §18): the Pub/Sub push
/// subscription's OIDC token in `Authorization: Bearer`, RS256 under Google's published keys
/// (`google.pushKeysUrl`, fetched and cached like the ID-token keys: `TokenKeyStore`), `iss`
/// Google's, `aud` = `google.pushAudience`, `email` = `google.pushServiceAccount` and
/// `email_verified`, within its times.
struct GooglePushVerifier: Sendable {
    let tokens: IDTokenVerifier
    let serviceAccount: String

    static let issuer = "https://accounts.google.com"

    /// nil without `google.pushAudience` and `google.pushServiceAccount`: the push route then
    /// answers 501.
    static func load(_ google: BillingConfiguration.Google, logger: Logger, clock: any BillingClock) throws(ConfigurationError)
        -> GooglePushVerifier?
    {
        guard let audience = google.pushAudience, !audience.isEmpty, let account = google.pushServiceAccount, !account.isEmpty
        else { return nil }
        let timeout = google.client.timeoutSeconds * 1000
        let client = CurlHTTPClient(
            timeoutMilliseconds: timeout, connectTimeoutMilliseconds: min(timeout, google.client.connectTimeoutSeconds * 1000),
            caFile: google.client.caFile)
        let store = try TokenKeyStore(path: nil, issuer: TokenKeyStore.Issuer(url: google.pushKeysUrl, client: client), clock: clock, logger: logger)
        return GooglePushVerifier(
            tokens: IDTokenVerifier(
                keyStore: store, issuer: issuer, alsoAccepting: ["accounts.google.com"], audience: audience, leewaySeconds: 60,
                cachedTokens: 256),
            serviceAccount: account)
    }

    func verify(_ request: HTTPRequest, now: Timestamp) throws(AuthError) {
        guard let bearer = request.bearerToken else { throw AuthError(.missing) }
        let token = try tokens.verify(bearer, now: now)
        guard token.emailVerified, let email = token.email, constantTimeEquals(email, serviceAccount) else {
            throw AuthError(.wrongAccount)
        }
    }
}

/// `POST /api/v1/billing/webhooks/google`: a Pub/Sub push of a Real-Time Developer
/// Notification (SPEC §18, docs/googleplay.md).
///
/// - Refused before anything is read or written, never stored: a push without a valid OIDC
///   token (401 with the reason), a body that is not a push (400).
/// - A push for another `packageName` is 422 `package_mismatch`, not stored: Pub/Sub keeps
///   redelivering it (for its retention, 7 days by default) until `google.packageName` is set
///   right, and the log and `billing_webhook_events_total{provider="google"}` say so.
/// - Deduplicated by `messageId` (the inbox's unique key `gpush:<messageId>`): a redelivery
///   answers 200 `{duplicate: true}` without reading Play again.
/// - A subscription notification reads the token's state from the Play Developer API and
///   records it (`GooglePlayIngestion`); while Play cannot be read, 503
///   `provider_unavailable` (Pub/Sub redelivers), nothing recorded. A token Play does not
///   know is recorded as an `unknown` event and answered 200 (nothing to redeliver for).
/// - A one-time product notification reads the purchase from `purchases.productsv2` and
///   records it the same way.
/// - A voided purchase is a `refund` of what that token granted, at the notification's time,
///   keyed by token and order (`gvoid:…`: the same void listed by the Voided Purchases API is
///   the same event);
///   a test notification is a `test` event; other kinds (refund reviews, newer ones) are
///   stored as `unknown` events, answered 200.
/// - The 200 is sent after the commit; the acknowledgement at Google follows it.
struct GooglePlayWebhook: Sendable {
    let verifier: GooglePushVerifier?
    let ingestion: GooglePlayIngestion?
    let maxBodyBytes: Int
    let metrics: BillingMetrics

    func handle(_ request: HTTPRequest, _ context: some DatabaseRequestContext) throws -> HTTPResponse {
        guard let verifier, let ingestion else {
            throw APIError.notConfigured(
                "Google Play notifications are not configured (google.packageName, google.serviceAccountFile, google.pushAudience, google.pushServiceAccount)"
            )
        }
        let now = context.clock.now()
        do {
            try verifier.verify(request, now: now)
        } catch {
            refused("oidc_" + error.reason.rawValue, context)
            throw APIError.unauthorized("the push's OIDC token was refused: \(error.description)", code: error.reason.rawValue)
        }
        let push: GooglePlayPush
        do {
            push = try GooglePlayPush.decode(try request.jsonBody(limits: JSONLimits(maxBytes: min(maxBodyBytes, 1 << 18), maxDepth: 8)))
        } catch {
            refused("malformed", context)
            throw error
        }
        guard push.packageName == ingestion.api.packageName else {
            refused("package_mismatch", context)
            throw APIError.unprocessable("the notification is for another app than google.packageName", code: "package_mismatch")
        }
        let db = try context.requireDatabase()
        let key = "gpush:" + push.messageId
        if try db.queryOne(
            "SELECT 1 AS seen FROM billing_events WHERE provider = \(EventProvider.googlePlay.rawValue) AND provider_event_id = \(key)") != nil
        {
            return answer(EventIngestion.Outcome(duplicate: true, status: nil, eventId: nil, users: []), type: "duplicate", context)
        }
        var payload: JSONObject = ["messageId": .string(push.messageId), "notification": Self.scrubbed(push.developerNotification)]
        payload["eventTimeMillis"] = push.eventTime.map { .int($0.millisecondsSinceEpoch) } ?? .null

        switch push.notification {
        case .subscription(let type, let token):
            return try readAndRecord(token, kind: .subscription, cause: type, push: push, key: key, payload: payload, ingestion, context, on: db)
        case .oneTimeProduct(let type, let token, _):
            let cause = type == 1 ? "ONE_TIME_PRODUCT_PURCHASED" : type == 2 ? "ONE_TIME_PRODUCT_CANCELED" : "ONE_TIME_PRODUCT_\(type)"
            return try readAndRecord(token, kind: .product, cause: cause, push: push, key: key, payload: payload, ingestion, context, on: db)
        case .voided(let token, let orderId, _, let refundType):
            // Whatever the product: what that token granted ends at the notification's time (a
            // quantity-based partial refund of a one-time product too: its access is one grant).
            let event = GooglePlayEvent.voided(
                token: token, orderId: orderId, at: push.eventTime ?? now, reason: nil,
                rawType: "VOIDED_PURCHASE/" + (refundType == 2 ? "QUANTITY_BASED_PARTIAL_REFUND" : "FULL_REFUND"))
            return answer(try ingestion.recordNotice(event, payload: payload, now: now, on: db), type: event.rawType, context)
        case .test:
            let event = notice(push, key: key, rawType: "TEST_NOTIFICATION", kind: .test, token: nil, now: now)
            return answer(try ingestion.recordNotice(event, payload: payload, now: now, on: db), type: event.rawType, context)
        case .other(let name):
            let event = notice(push, key: key, rawType: name.uppercased(), kind: .unknown, token: nil, now: now)
            return answer(try ingestion.recordNotice(event, payload: payload, now: now, on: db), type: event.rawType, context)
        }
    }

    /// Reads the token's state (503 `provider_unavailable` while Play cannot be read: Pub/Sub
    /// redelivers; a token Play does not know is an `unknown` event), records it, then
    /// acknowledges it at Google if it is not yet.
    private func readAndRecord(
        _ token: String, kind: GooglePlayRead.Kind, cause: String, push: GooglePlayPush, key: String, payload: JSONObject,
        _ ingestion: GooglePlayIngestion, _ context: some DatabaseRequestContext, on db: DatabaseConnection
    ) throws -> HTTPResponse {
        let read: GooglePlayRead
        do {
            read = try ingestion.read(token: token, kind: kind)
        } catch  where error.kind == .status && (error.status == 404 || error.status == 410) {
            let event = notice(push, key: key, rawType: cause + "/UNKNOWN_TOKEN", kind: .unknown, token: token, now: context.clock.now())
            return answer(try ingestion.recordNotice(event, payload: payload, now: context.clock.now(), on: db), type: event.rawType, context)
        } catch {
            context.logger.warning("Play Developer API not readable; the push is redelivered", ["google.error": .string(error.code)])
            metrics.webhook(.google, .rejected)
            context.outcome = "unavailable"
            throw APIError.unavailable("the Play Developer API could not be read; redeliver", code: "provider_unavailable")
        }
        let recorded = try ingestion.record(
            read, token: token, cause: cause, providerEventId: key, poster: nil, readAt: context.clock.now(), payload: payload, on: db)
        ingestion.acknowledgeIfNeeded(read, token: token, now: context.clock.now(), logger: context.logger, on: db)
        return answer(recorded.ingestion, type: cause, context)
    }

    /// An event of what the push says itself, at its `eventTimeMillis`.
    private func notice(_ push: GooglePlayPush, key: String, rawType: String, kind: EventKind, token: String?, now: Timestamp) -> StoreEvent {
        StoreEvent(
            provider: .googlePlay, providerEventId: key, rawType: String(rawType.prefix(64)), kind: kind,
            intrinsicAt: push.eventTime ?? now, subscriptionId: token.map { GooglePlayEvent.subscriptionId(token: $0) },
            platform: "google_play")
    }

    /// The DeveloperNotification as the inbox keeps it: its purchase token replaced by the
    /// subscription id it names.
    static func scrubbed(_ notification: JSON) -> JSON {
        guard var object = notification.objectValue else { return notification }
        for member in ["subscriptionNotification", "voidedPurchaseNotification", "oneTimeProductNotification"] {
            guard var inner = object[member]?.objectValue, let token = inner["purchaseToken"]?.stringValue else { continue }
            inner["purchaseToken"] = nil
            inner["purchaseTokenSubscriptionId"] = .string(GooglePlayEvent.subscriptionId(token: token))
            object[member] = .object(inner)
        }
        return .object(object)
    }

    private func refused(_ reason: String, _ context: some DatabaseRequestContext) {
        context.logger.warning("webhook refused", ["webhook.provider": "google", "webhook.reason": .string(reason)])
        metrics.webhook(.google, .rejected)
        context.outcome = "rejected"
    }

    private func answer(_ outcome: EventIngestion.Outcome, type: String, _ context: some DatabaseRequestContext) -> HTTPResponse {
        let result = EventIngestion.metricsOutcome(outcome)
        metrics.webhook(.google, result)
        context.outcome = result.rawValue
        context.logger.info(
            "webhook ingested",
            [
                "webhook.provider": "google", "event.type": .string(type),
                "event.outcome": .string(outcome.duplicate ? "duplicate" : outcome.status?.rawValue ?? "unknown"),
                "event.id": outcome.eventId.map { .int(Int64($0)) } ?? .null,
            ])
        return .json(.ok, outcome.json)
    }
}
