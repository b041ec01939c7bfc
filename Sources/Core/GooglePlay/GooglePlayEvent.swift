/// What Google Play tells the server, as inbox events (SPEC §18): the Pub/Sub push's
/// DeveloperNotification decoded, and a subscription's state read from the Play Developer
/// API as one `google_play` event of kind `subscriber_state` for the fold.
///
/// A notification only says that a purchase token changed; the state read after it is the
/// truth, so a state event is ordered by when it was read (its `intrinsicAt`), not by the
/// notification's `eventTimeMillis`: the later read wins, whatever order they commit in.
enum GooglePlayEvent {
    /// The subscription id of a token's events: `gp:` + the token's SHA-256 (the token is
    /// the user's credential at Google and is kept once, in `billing_google_purchases`).
    static func subscriptionId(token: String) -> String { "gp:" + SHA256.hexHash(Array(token.utf8)) }

    /// The catalog's tier of a Play product: `subscriptionId:basePlanId`, else `subscriptionId`.
    static func tier(of item: GooglePlaySubscription.LineItem, tiers: TierResolver) -> Tier? {
        tiers.tier(entitlementIds: [], productId: item.catalogProductId)
            ?? (item.basePlanId == nil ? nil : tiers.tier(entitlementIds: [], productId: item.productId))
    }

    /// The state as an event read at `readAt` (`subscriber_state`; `expiration` for EXPIRED
    /// and PAUSED). `cause` names what made the
    /// server read it (the push's notification type, `POSTED` for the app's post, `PULL`);
    /// `rawType` is `cause/STATE` (`SUBSCRIPTION_RENEWED/ACTIVE`).
    ///
    /// - The line item that lasts longest is the subscription's product (Play gives one per
    ///   item of a multi-line purchase); a free-trial offer phase is a trial, an introductory
    ///   price an intro period.
    /// - Its order (`latestSuccessfulOrderId`) is the event's `transactionId`: each paid period
    ///   has its own, and `purchasedAt` (here the subscription's `startTime`) becomes that
    ///   period's start when it is recorded (`GooglePlayIngestion.periodStart`).
    /// - IN_GRACE_PERIOD and ON_HOLD are a failed payment being retried, with grace until the
    ///   expiry (Play extends it to the grace's end) or without access; ON_HOLD, PAUSED and
    ///   EXPIRED end the access at the read at the latest; ACTIVE and CANCELED give access
    ///   until the expiry (judged when read: an ACTIVE one past it is a renewal overdue, which
    ///   the sweeper pulls); PENDING and PENDING_PURCHASE_CANCELED were never paid: not folded.
    static func state(
        _ subscription: GooglePlaySubscription, token: String, cause: String, providerEventId: String,
        readAt: Timestamp, tiers: TierResolver
    ) -> StoreEvent {
        let never = Timestamp(millisecondsSinceEpoch: .min)
        let item = subscription.lineItems.max { ($0.expiryTime ?? never) < ($1.expiryTime ?? never) }
        // ON_HOLD, PAUSED and EXPIRED give no access whatever the expiry says (a pause can
        // start before the period it skips ends; a revocation ends it early).
        let ended = [.onHold, .paused, .expired].contains(subscription.state)
        let expiresAt = ended ? min(subscription.expiresAt ?? readAt, readAt) : subscription.expiresAt
        let failing = subscription.state == .inGracePeriod || subscription.state == .onHold
        let periodType: String
        switch item?.offerPhase {
        case "freeTrial": periodType = "TRIAL"
        case "introductoryPrice": periodType = "INTRO"
        default: periodType = "NORMAL"
        }
        // A purchase still pending payment (or one canceled before it was paid) was never a
        // subscription: stored, never folded (`unknown` is not applied for Play).
        let paid = ![.pending, .pendingPurchaseCanceled, .unspecified].contains(subscription.state)
        // EXPIRED (and PAUSED: no access until it resumes) is an expiration: the fold ends the
        // subscription there; any other paid state states the subscription as it stands.
        let kind: EventKind = !paid ? .unknown : [.expired, .paused].contains(subscription.state) ? .expiration : .subscriberState
        return StoreEvent(
            provider: .googlePlay, providerEventId: providerEventId,
            rawType: String((cause + "/" + subscription.state.shortName).prefix(64)), kind: kind,
            intrinsicAt: readAt,
            subscriptionId: subscriptionId(token: token), productId: item?.catalogProductId,
            tier: item.flatMap { tier(of: $0, tiers: tiers) }, periodType: periodType, isTrial: item?.isFreeTrial ?? false,
            environment: subscription.isTest ? .sandbox : .production, platform: "google_play",
            purchasedAt: subscription.startTime, expiresAt: expiresAt,
            graceExpiresAt: subscription.state == .inGracePeriod ? expiresAt : nil,
            priceMilli: item?.priceMilli, currency: item?.currency, cancelReason: subscription.canceledBy,
            willRenew: subscription.state == .canceled || subscription.state == .expired ? false : subscription.willRenew,
            inBillingRetry: failing,
            replacesSubscriptionId: subscription.linkedPurchaseToken.map { subscriptionId(token: $0) },
            transactionId: paidOrder(subscription, item: item))
    }

    /// The order of the state's paid period: the line item's `latestSuccessfulOrderId`. The
    /// deprecated top-level `latestOrderId` (older answers) is the latest order whatever came
    /// of it (Google: "success, pending, or declined"), so it stands in only where no charge
    /// is failing or pending: in grace, on hold or pending it may be the declined renewal,
    /// which is no sale (nil: the read keeps the subscription's first period key).
    static func paidOrder(_ subscription: GooglePlaySubscription, item: GooglePlaySubscription.LineItem?) -> String? {
        if let order = item?.latestSuccessfulOrderId { return order }
        let settled: [GooglePlaySubscription.State] = [.active, .canceled, .expired]
        return settled.contains(subscription.state) ? subscription.latestOrderId : nil
    }

    /// A one-time product purchase read at `readAt`: PURCHASED is a `non_renewing_purchase`
    /// whose access lasts what the `products` catalog says of the product (lifetime, a
    /// non-renewing duration, a consumable's none; a product the catalog does not list as
    /// one-time: no end); CANCELLED (refunded or canceled by Google) a `refund`; PENDING and
    /// the unspecified state are stored, never folded.
    static func oneTime(
        _ purchase: GooglePlayProductPurchase, token: String, cause: String, providerEventId: String, readAt: Timestamp,
        tiers: TierResolver, catalog: [String: BillingConfiguration.Product]
    ) -> StoreEvent {
        let productId = purchase.productIds.first
        let kind: EventKind
        switch purchase.state {
        case .purchased: kind = .nonRenewingPurchase
        case .cancelled: kind = .refund
        case .pending, .unspecified: kind = .unknown
        }
        let expiresAt = productId.flatMap { catalog[$0]?.oneTimeExpiry(purchasedAt: purchase.completedAt ?? readAt) } ?? nil
        return StoreEvent(
            provider: .googlePlay, providerEventId: providerEventId, rawType: String((cause + "/" + purchase.state.rawValue).prefix(64)),
            kind: kind, intrinsicAt: readAt, subscriptionId: subscriptionId(token: token), productId: productId,
            tier: tiers.tier(entitlementIds: [], productId: productId), periodType: "NORMAL",
            environment: purchase.isTest ? .sandbox : .production, platform: "google_play", purchasedAt: purchase.completedAt,
            expiresAt: kind == .nonRenewingPurchase ? expiresAt : nil)
    }

    /// A voided purchase (refunded, canceled or charged back), from a push or the Voided
    /// Purchases API: a `refund` of what the token granted at `at`, keyed by the token and
    /// the order so that the push and the API's listing of one void are one event.
    static func voided(token: String, orderId: String?, at: Timestamp, reason: String?, rawType: String) -> StoreEvent {
        let subscription = subscriptionId(token: token)
        let key = "gvoid:" + subscription.dropFirst(3).prefix(24) + ":" + (orderId ?? "-").utf8Prefix(150)
        return StoreEvent(
            provider: .googlePlay, providerEventId: key, rawType: String(rawType.prefix(64)), kind: .refund, intrinsicAt: at,
            subscriptionId: subscription, platform: "google_play", cancelReason: reason)
    }

    /// A digest of what a state says (not when it was read): the same state read twice is
    /// one event (`GooglePlayIngestion.pullEventId`).
    static func digest(_ event: StoreEvent) -> String {
        let fields: [String?] = [
            event.rawType.split(separator: "/").last.map(String.init), event.productId, event.environment.rawValue,
            event.periodType, event.purchasedAt.map { String($0.millisecondsSinceEpoch) },
            event.expiresAt.map { String($0.millisecondsSinceEpoch) }, event.willRenew.map { $0 ? "1" : "0" },
            event.inBillingRetry.map { $0 ? "1" : "0" }, event.tier?.rawValue, event.replacesSubscriptionId,
            event.priceMilli.map(String.init), event.currency,
        ]
        return String(SHA256.hexHash(Array(fields.map { $0 ?? "-" }.joined(separator: "|").utf8)).prefix(24))
    }
}

extension GooglePlaySubscription.State {
    /// The state without its `SUBSCRIPTION_STATE_` prefix.
    var shortName: String {
        let prefix = "SUBSCRIPTION_STATE_"
        return rawValue.hasPrefix(prefix) ? String(rawValue.dropFirst(prefix.count)) : rawValue
    }

    /// Whether Google counts the purchase as paid, so that it can (and must) be acknowledged.
    var isAcknowledgeable: Bool { [.active, .inGracePeriod, .canceled, .onHold, .paused].contains(self) }
}

/// A Pub/Sub push of a Real-Time Developer Notification (SPEC §18):
/// `{"message": {"data": base64 DeveloperNotification, "messageId", "publishTime",
/// "attributes"}, "subscription"}`, decoded strictly (a field of the wrong type is refused).
struct GooglePlayPush: Sendable, Equatable {
    enum Notification: Sendable, Equatable {
        /// `subscriptionNotification`: the token's state changed (`type` as Google names it).
        case subscription(type: String, purchaseToken: String)
        /// `voidedPurchaseNotification`: refunded or charged back (`productType` 1
        /// subscription, 2 one-time; `refundType` 1 full, 2 partial by quantity).
        case voided(purchaseToken: String, orderId: String?, productType: Int, refundType: Int?)
        /// `oneTimeProductNotification` (1 purchased, 2 canceled).
        case oneTimeProduct(type: Int, purchaseToken: String, sku: String?)
        /// `testNotification`: sent from the Play Console to check the setup.
        case test
        /// A kind this server does not know (`pendingRefundReviewNotification`, newer ones).
        case other(String)
    }

    var messageId: String
    var packageName: String
    var eventTime: Timestamp?
    var notification: Notification
    /// The decoded DeveloperNotification, for the inbox's payload.
    var developerNotification: JSON

    /// Google's names of `subscriptionNotification.notificationType`.
    static let subscriptionTypes: [Int64: String] = [
        1: "SUBSCRIPTION_RECOVERED", 2: "SUBSCRIPTION_RENEWED", 3: "SUBSCRIPTION_CANCELED", 4: "SUBSCRIPTION_PURCHASED",
        5: "SUBSCRIPTION_ON_HOLD", 6: "SUBSCRIPTION_IN_GRACE_PERIOD", 7: "SUBSCRIPTION_RESTARTED",
        8: "SUBSCRIPTION_PRICE_CHANGE_CONFIRMED", 9: "SUBSCRIPTION_DEFERRED", 10: "SUBSCRIPTION_PAUSED",
        11: "SUBSCRIPTION_PAUSE_SCHEDULE_CHANGED", 12: "SUBSCRIPTION_REVOKED", 13: "SUBSCRIPTION_EXPIRED",
        17: "SUBSCRIPTION_ITEMS_CHANGED", 18: "SUBSCRIPTION_CANCELLATION_SCHEDULED", 19: "SUBSCRIPTION_PRICE_CHANGE_UPDATED",
        20: "SUBSCRIPTION_PENDING_PURCHASE_CANCELED", 22: "SUBSCRIPTION_PRICE_STEP_UP_CONSENT_UPDATED",
    ]

    static func decode(_ body: JSON) throws(PayloadError) -> GooglePlayPush {
        let root = try PayloadReader(body, path: "")
        guard let messageValue = root.value("message") else { throw PayloadError("message", "required object") }
        let message = try PayloadReader(messageValue, path: "message")
        let messageId = try message.requiredString("messageId", maxLength: 128)
        guard !messageId.isEmpty else { throw PayloadError("message.messageId", "must not be empty") }
        let data = try message.requiredString("data", maxLength: 1 << 16)
        guard let bytes = try? Base64.decode(data), let notification = try? JSON.parse(bytes, limits: JSONLimits(maxBytes: 1 << 16, maxDepth: 8))
        else {
            throw PayloadError("message.data", "expected base64 of a JSON DeveloperNotification")
        }
        let n = try PayloadReader(notification, path: "message.data")
        let packageName = try n.requiredString("packageName", maxLength: 255)
        let eventTime = try Self.milliseconds(n, "eventTimeMillis")
        let kind: Notification
        if let value = n.value("subscriptionNotification") {
            let s = try PayloadReader(value, path: "message.data.subscriptionNotification")
            let type = try Self.integer(s, "notificationType")
            kind = .subscription(
                type: subscriptionTypes[type] ?? "SUBSCRIPTION_TYPE_\(type)", purchaseToken: try token(s))
        } else if let value = n.value("voidedPurchaseNotification") {
            let v = try PayloadReader(value, path: "message.data.voidedPurchaseNotification")
            kind = .voided(
                purchaseToken: try token(v), orderId: try v.string("orderId", maxLength: 191),
                productType: Int(try Self.integer(v, "productType")),
                refundType: v.value("refundType") == nil ? nil : Int(try Self.integer(v, "refundType")))
        } else if let value = n.value("oneTimeProductNotification") {
            let o = try PayloadReader(value, path: "message.data.oneTimeProductNotification")
            kind = .oneTimeProduct(
                type: Int(try Self.integer(o, "notificationType")), purchaseToken: try token(o), sku: try o.string("sku", maxLength: 191))
        } else if n.value("testNotification") != nil {
            kind = .test
        } else {
            let other = notification.objectValue?.keys.first { $0.hasSuffix("Notification") } ?? "none"
            kind = .other(String(other.prefix(64)))
        }
        return GooglePlayPush(
            messageId: messageId, packageName: packageName, eventTime: eventTime, notification: kind,
            developerNotification: notification)
    }

    private static func token(_ r: PayloadReader) throws(PayloadError) -> String {
        let token = try r.requiredString("purchaseToken", maxLength: 4096)
        guard !token.isEmpty else { throw PayloadError("\(r.path).purchaseToken", "must not be empty") }
        return token
    }

    /// An int64 Google writes as a number or as a decimal string (proto3 JSON).
    private static func integer(_ r: PayloadReader, _ key: String) throws(PayloadError) -> Int64 {
        switch r.value(key) {
        case .string(let text)?:
            if let value = Int64(text) { return value }
        case let value?:
            if let value = value.int64Value { return value }
        case nil:
            throw PayloadError("\(r.path).\(key)", "required integer")
        }
        throw PayloadError("\(r.path).\(key)", "expected an integer")
    }

    private static func milliseconds(_ r: PayloadReader, _ key: String) throws(PayloadError) -> Timestamp? {
        guard r.value(key) != nil else { return nil }
        let ms = try integer(r, key)
        guard (0...253_402_300_799_999).contains(ms) else { throw PayloadError("\(r.path).\(key)", "out of range") }
        return Timestamp(millisecondsSinceEpoch: ms)
    }
}
