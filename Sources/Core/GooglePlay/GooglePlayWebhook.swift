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
/// - A push for another `packageName` is a setting mismatch: 422 `package_mismatch`, kept in
///   the quarantine like the App Store's (`Quarantine`: the push's body, one row per
///   `messageId`, counted as `outcome="quarantined"`), re-run by `events.retryQuarantined`
///   once `google.packageName` is right (`GooglePlayQuarantineReplay`); Pub/Sub redelivers
///   it meanwhile (for its retention, 7 days by default).
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
        let db = try context.requireDatabase()
        guard push.packageName == ingestion.api.packageName else {
            // Verified as Google's, refused by our setting: kept for a re-run once it is fixed.
            let row = try Quarantine.record(
                provider: .googlePlay, deliveryId: push.key, reason: "package_mismatch",
                detail: "packageName " + push.packageName, body: request.body, now: now, on: db)
            refused("package_mismatch", quarantined: row, context)
            throw APIError.unprocessable("the notification is for another app than google.packageName", code: "package_mismatch")
        }
        if try Quarantine.existingEvent(provider: .googlePlay, providerEventId: push.key, on: db) != nil {
            return answer(EventIngestion.Outcome(duplicate: true, status: nil, eventId: nil, users: []), type: "duplicate", context)
        }
        switch push.step(now: now) {
        case .read(let token, let kind, let cause):
            return try readAndRecord(token, kind: kind, cause: cause, push: push, ingestion, context, on: db)
        case .notice(let event):
            return answer(try ingestion.recordNotice(event, payload: push.inboxPayload, now: now, on: db), type: event.rawType, context)
        }
    }

    /// Reads the token's state (503 `provider_unavailable` while Play cannot be read: Pub/Sub
    /// redelivers; a token Play does not know is an `unknown` event), records it, then
    /// acknowledges it at Google if it is not yet.
    private func readAndRecord(
        _ token: String, kind: GooglePlayRead.Kind, cause: String, push: GooglePlayPush,
        _ ingestion: GooglePlayIngestion, _ context: some DatabaseRequestContext, on db: DatabaseConnection
    ) throws -> HTTPResponse {
        let read: GooglePlayRead
        let payload = push.inboxPayload
        do {
            read = try ingestion.read(token: token, kind: kind)
        } catch  where error.isUnknownToken {
            let event = push.unknownToken(token, cause: cause, now: context.clock.now())
            return answer(try ingestion.recordNotice(event, payload: payload, now: context.clock.now(), on: db), type: event.rawType, context)
        } catch {
            context.logger.warning("Play Developer API not readable; the push is redelivered", ["google.error": .string(error.code)])
            metrics.webhook(.google, .rejected)
            context.outcome = "unavailable"
            throw APIError.unavailable("the Play Developer API could not be read; redeliver", code: "provider_unavailable")
        }
        let recorded = try ingestion.record(
            read, token: token, cause: cause, providerEventId: push.key, poster: nil, readAt: context.clock.now(), payload: payload, on: db)
        ingestion.acknowledgeIfNeeded(read, token: token, now: context.clock.now(), logger: context.logger, on: db)
        return answer(recorded.ingestion, type: cause, context)
    }

    /// Logs and counts a refusal (`quarantined`: its quarantine row, nil when none was written).
    private func refused(_ reason: String, quarantined: UInt64? = nil, _ context: some DatabaseRequestContext) {
        context.logger.warning(
            "webhook refused",
            [
                "webhook.provider": "google", "webhook.reason": .string(reason),
                "quarantine.id": quarantined.map { .int(Int64($0)) } ?? .null,
            ])
        metrics.webhook(.google, quarantined == nil ? .rejected : .quarantined)
        context.outcome = quarantined == nil ? "rejected" : "quarantined"
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

/// What a push asks of the server, decided by the push alone: a state to read from Play, or
/// an event the push states itself. The webhook and the quarantine's re-run do the same.
enum GooglePlayPushStep {
    /// A subscription or one-time product notification: read the token's state, of `kind`.
    case read(token: String, kind: GooglePlayRead.Kind, cause: String)
    /// A voided purchase, a test notification, a kind this server does not fold.
    case notice(StoreEvent)
}

extension GooglePlayPush {
    /// The inbox's key of the push (its state read from Play is recorded under it).
    var key: String { "gpush:" + messageId }

    func step(now: Timestamp) -> GooglePlayPushStep {
        switch notification {
        case .subscription(let type, let token):
            return .read(token: token, kind: .subscription, cause: type)
        case .oneTimeProduct(let type, let token, _):
            let cause = type == 1 ? "ONE_TIME_PRODUCT_PURCHASED" : type == 2 ? "ONE_TIME_PRODUCT_CANCELED" : "ONE_TIME_PRODUCT_\(type)"
            return .read(token: token, kind: .product, cause: cause)
        case .voided(let token, let orderId, _, let refundType):
            // Whatever the product: what that token granted ends at the notification's time (a
            // quantity-based partial refund of a one-time product too: its access is one grant).
            return .notice(
                GooglePlayEvent.voided(
                    token: token, orderId: orderId, at: eventTime ?? now, reason: nil,
                    rawType: "VOIDED_PURCHASE/" + (refundType == 2 ? "QUANTITY_BASED_PARTIAL_REFUND" : "FULL_REFUND")))
        case .test:
            return .notice(notice(rawType: "TEST_NOTIFICATION", kind: .test, token: nil, now: now))
        case .other(let name):
            return .notice(notice(rawType: name.uppercased(), kind: .unknown, token: nil, now: now))
        }
    }

    /// The event of a push naming a token Play does not know (404/410): kept, folded as nothing.
    func unknownToken(_ token: String, cause: String, now: Timestamp) -> StoreEvent {
        notice(rawType: cause + "/UNKNOWN_TOKEN", kind: .unknown, token: token, now: now)
    }

    /// An event of what the push says itself, at its `eventTimeMillis`.
    private func notice(rawType: String, kind: EventKind, token: String?, now: Timestamp) -> StoreEvent {
        StoreEvent(
            provider: .googlePlay, providerEventId: key, rawType: String(rawType.prefix(64)), kind: kind,
            intrinsicAt: eventTime ?? now, subscriptionId: token.map { GooglePlayEvent.subscriptionId(token: $0) },
            platform: "google_play")
    }

    /// What the inbox keeps of the push: its id, time and DeveloperNotification, the purchase
    /// token replaced by the subscription id it names.
    var inboxPayload: JSONObject {
        var payload: JSONObject = ["messageId": .string(messageId), "notification": Self.scrubbed(developerNotification)]
        payload["eventTimeMillis"] = eventTime.map { .int($0.millisecondsSinceEpoch) } ?? .null
        return payload
    }

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
}

extension ProviderAPIError {
    /// Play does not know the purchase token (404, or 410 for one long gone).
    var isUnknownToken: Bool { kind == .status && (status == 404 || status == 410) }
}
