/// RevenueCat's CustomerInfo (REST API v1, `GET /v1/subscribers/{app_user_id}`) as inbox
/// events (SPEC §15), provider `revenuecat_pull`, for the one user it was asked about.
///
/// - Each `subscriber.subscriptions[product]` is a `subscriber_state` event at the answer's
///   `request_date_ms`: its current period (`purchase_date`, `expires_date`, `period_type`),
///   renewal intent (`unsubscribe_detected_at`), billing issue and grace
///   (`billing_issues_detected_at`, `grace_period_expires_date`), environment (`is_sandbox`),
///   store and ownership (`ownership_type` FAMILY_SHARED), price when given. The fold
///   matches it to the user's RevenueCat subscription of the same product and store (v1
///   names no original transaction).
/// - One with `refunded_at` is a `refund` of that period at `refunded_at` instead.
/// - Each `subscriber.non_subscriptions[product][i]` is a `non_renewing_purchase` at its
///   `purchase_date`, lasting what the catalog says (else its entitlement's `expires_date`;
///   none: no end).
/// - Tiers come from the entitlements naming the product (`product_identifier`), as a
///   webhook's `entitlement_ids` do, else the catalog.
struct RevenueCatSubscriber: Sendable {
    /// One event a pull states, with what identifies it in the inbox.
    struct Pulled: Sendable {
        var event: StoreEvent
        /// What the inbox stores of it: the subscription or purchase item as RevenueCat
        /// answered it, with the answer's request date.
        var payload: JSON
        /// A subscriber state's digest of what it states (its key also names the event it
        /// follows: `RevenueCatReconciler.stateEventId`); nil for a refund or a one-time
        /// purchase, whose key is fixed (`event.providerEventId`).
        var stateDigest: String?
    }

    var requestDate: Timestamp
    var pulled: [Pulled]

    /// The answer decoded; `PayloadError` when it is not CustomerInfo's shape.
    static func decode(
        _ info: JSON, appUserId: String, tiers: TierResolver,
        catalog: [String: BillingConfiguration.Product]
    ) throws(PayloadError) -> RevenueCatSubscriber {
        let root = try PayloadReader(info, path: "")
        guard let requestDate = try root.milliseconds("request_date_ms") else {
            throw PayloadError("request_date_ms", "required integer milliseconds")
        }
        guard let subscriberValue = root.value("subscriber") else { throw PayloadError("subscriber", "required object") }
        let subscriber = try PayloadReader(subscriberValue, path: "subscriber")
        let entitlements = try entitlementsByProduct(subscriber)
        var pulled: [Pulled] = []
        let userKey = SHA256.hexHash(Array(appUserId.utf8)).prefix(16)

        for (product, value) in try members(subscriber, "subscriptions") {
            let s = try PayloadReader(value, path: "subscriber.subscriptions.\(product.prefix(64))")
            let productId = product.utf8Prefix(191)
            let store = try s.string("store", maxLength: 32)?.lowercased()
            let purchasedAt = try date(s, "purchase_date")
            let expiresAt = try date(s, "expires_date")
            let periodType = try s.string("period_type", maxLength: 32)?.uppercased()
            let environment: StoreEnvironment = try s.bool("is_sandbox") == true ? .sandbox : .production
            let (priceMilli, currency) = try price(s)
            let refundedAt = try date(s, "refunded_at")
            let billingIssue = try date(s, "billing_issues_detected_at")
            var event = StoreEvent(
                provider: .revenuecatPull, providerEventId: "", rawType: refundedAt == nil ? "SUBSCRIBER" : "SUBSCRIBER/REFUNDED",
                kind: refundedAt == nil ? .subscriberState : .refund, intrinsicAt: refundedAt ?? requestDate,
                subscriptionId: nil, productId: productId,
                tier: tiers.tier(entitlementIds: entitlements[productId] ?? [], productId: productId),
                periodType: periodType, isTrial: periodType == "TRIAL", environment: environment,
                platform: store == "promotional" ? "promotional" : store,
                purchasedAt: purchasedAt, expiresAt: expiresAt,
                graceExpiresAt: try date(s, "grace_period_expires_date"),
                priceMilli: priceMilli, currency: currency,
                willRenew: refundedAt != nil ? false : try date(s, "unsubscribe_detected_at") == nil,
                inBillingRetry: refundedAt != nil ? nil : billingIssue != nil,
                familyShared: try s.string("ownership_type", maxLength: 32)?.uppercased() == "FAMILY_SHARED")
            event.subscriptionId = StoreFold.pulledKeyPrefix + productId.utf8Prefix(146) + "@" + (store ?? "")
            var payload = s.object
            payload["request_date_ms"] = .int(requestDate.millisecondsSinceEpoch)
            payload["product_id"] = .string(productId)
            if let refundedAt {
                // The refund of this period, learned by pulling: one event per (period, refund).
                let fields = [
                    productId, store ?? "", String(purchasedAt?.millisecondsSinceEpoch ?? 0),
                    String(refundedAt.millisecondsSinceEpoch),
                ].joined(separator: "|")
                event.providerEventId = "rcpull:\(userKey):refund:\(SHA256.hexHash(Array(fields.utf8)).prefix(32))"
                pulled.append(Pulled(event: event, payload: .object(payload), stateDigest: nil))
            } else {
                pulled.append(Pulled(event: event, payload: .object(payload), stateDigest: digest(event)))
            }
        }

        for (product, value) in try members(subscriber, "non_subscriptions") {
            guard let items = value.arrayValue, items.count <= 1000 else {
                throw PayloadError("subscriber.non_subscriptions.\(product.prefix(64))", "expected an array")
            }
            let productId = product.utf8Prefix(191)
            for (index, item) in items.enumerated() {
                let p = try PayloadReader(item, path: "subscriber.non_subscriptions.\(product.prefix(64))[\(index)]")
                let id = try p.requiredString("id", maxLength: 128)
                let store = try p.string("store", maxLength: 32)?.lowercased()
                let purchasedAt = try date(p, "purchase_date")
                let (priceMilli, currency) = try price(p)
                let expiresAt: Timestamp?
                if let oneTime = catalog[productId]?.oneTimeExpiry(purchasedAt: purchasedAt) {
                    expiresAt = oneTime
                } else {
                    expiresAt = entitlementExpiry(subscriber, productId: productId)
                }
                let transactionId = try p.value("store_transaction_id").map { (v) throws(PayloadError) -> String in
                    if let s = v.stringValue { return s.utf8Prefix(191) }
                    if let n = v.int64Value { return String(n) }
                    throw PayloadError("store_transaction_id", "expected a string")
                }
                let event = StoreEvent(
                    provider: .revenuecatPull, providerEventId: "rcpull:\(userKey):purchase:\(id)", rawType: "NON_SUBSCRIPTION",
                    kind: .nonRenewingPurchase, intrinsicAt: purchasedAt ?? requestDate,
                    subscriptionId: transactionId ?? "revenuecat-purchase:\(id)", productId: productId,
                    tier: tiers.tier(entitlementIds: entitlements[productId] ?? [], productId: productId),
                    periodType: "NORMAL", environment: try p.bool("is_sandbox") == true ? .sandbox : .production,
                    platform: store, purchasedAt: purchasedAt, expiresAt: expiresAt, priceMilli: priceMilli, currency: currency)
                var payload = p.object
                payload["request_date_ms"] = .int(requestDate.millisecondsSinceEpoch)
                payload["product_id"] = .string(productId)
                pulled.append(Pulled(event: event, payload: .object(payload), stateDigest: nil))
            }
        }
        return RevenueCatSubscriber(requestDate: requestDate, pulled: pulled)
    }

    /// A short digest of what a subscriber state states (not when it was asked).
    static func digest(_ event: StoreEvent) -> String {
        let fields: [String?] = [
            event.kind.rawValue, event.productId, event.platform, event.environment.rawValue,
            event.periodType, event.purchasedAt.map { String($0.millisecondsSinceEpoch) },
            event.expiresAt.map { String($0.millisecondsSinceEpoch) },
            event.willRenew.map { $0 ? "1" : "0" }, event.inBillingRetry.map { $0 ? "1" : "0" },
            event.graceExpiresAt.map { String($0.millisecondsSinceEpoch) }, event.tier?.rawValue,
            event.familyShared ? "family" : "owner",
        ]
        let text = fields.map { $0 ?? "-" }.joined(separator: "|")
        return String(SHA256.hexHash(Array(text.utf8)).prefix(24))
    }

    // MARK: reading CustomerInfo

    /// The members of an optional object member (absent or null: none), in a fixed order.
    private static func members(_ r: PayloadReader, _ key: String) throws(PayloadError) -> [(String, JSON)] {
        guard let value = r.value(key) else { return [] }
        guard let object = value.objectValue, object.count <= 1000 else {
            throw PayloadError("subscriber.\(key)", "expected an object of at most 1000 products")
        }
        return object.map { ($0.key, $0.value) }.sorted { $0.0 < $1.0 }
    }

    /// product id → the entitlement ids naming it.
    private static func entitlementsByProduct(_ subscriber: PayloadReader) throws(PayloadError) -> [String: [String]] {
        var result: [String: [String]] = [:]
        for (entitlement, value) in try members(subscriber, "entitlements") {
            guard let product = value["product_identifier"]?.stringValue else { continue }
            result[product, default: []].append(entitlement)
        }
        return result
    }

    private static func entitlementExpiry(_ subscriber: PayloadReader, productId: String) -> Timestamp? {
        let ends = (subscriber.value("entitlements")?.objectValue ?? [:]).compactMap { member -> Timestamp? in
            guard member.value["product_identifier"]?.stringValue == productId else { return nil }
            return member.value["expires_date"]?.stringValue.flatMap { Timestamp(iso8601: $0) }
        }
        return ends.max()
    }

    /// An ISO-8601 date member (`2019-07-26T23:45:40Z`), nil when absent or null.
    private static func date(_ r: PayloadReader, _ key: String) throws(PayloadError) -> Timestamp? {
        guard let text = try r.string(key, maxLength: 64) else { return nil }
        guard let time = Timestamp(iso8601: text) else { throw PayloadError("\(r.path).\(key)", "expected an ISO-8601 date") }
        return time
    }

    /// `price {amount, currency}` in milli-units, when RevenueCat gives one with an ISO code.
    private static func price(_ r: PayloadReader) throws(PayloadError) -> (Int64?, String?) {
        guard let value = r.value("price") else { return (nil, nil) }
        let p = try PayloadReader(value, path: "\(r.path).price")
        guard let amount = try p.number("amount"), let code = try p.string("currency", maxLength: 3)?.uppercased(),
            code.utf8.count == 3, code.utf8.allSatisfy({ $0 >= 65 && $0 <= 90 })
        else { return (nil, nil) }
        return (Int64((amount * 1000).rounded()), code)
    }
}
