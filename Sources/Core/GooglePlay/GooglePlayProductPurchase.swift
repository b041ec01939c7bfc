/// A one-time product purchase as the Play Developer API states it (SPEC §18): the
/// `ProductPurchaseV2` of `purchases.productsv2.getproductpurchasev2`, decoded strictly on what
/// the server uses. Its access is the catalog's (`products`: lifetime, non_renewing with a
/// duration, consumable), as for the other stores' one-time purchases.
struct GooglePlayProductPurchase: Sendable, Equatable {
    enum State: String, Sendable, CaseIterable {
        case unspecified = "PURCHASE_STATE_UNSPECIFIED"
        case purchased = "PURCHASED"
        case cancelled = "CANCELLED"
        case pending = "PENDING"
    }

    var state: State
    /// `productLineItem[].productId`, in order.
    var productIds: [String]
    /// `purchaseCompletionTime`: when the purchase became PURCHASED.
    var completedAt: Timestamp?
    var obfuscatedAccountId: String?
    /// `testPurchaseContext` present: a license tester's purchase (sandbox here).
    var isTest: Bool
    var acknowledged: Bool
    var orderId: String?
    /// The answer as the inbox keeps it (it names no token).
    var payload: JSON = .null

    static func decode(_ json: JSON) throws(PayloadError) -> GooglePlayProductPurchase {
        let r = try PayloadReader(json, path: "product")
        guard let context = r.value("purchaseStateContext") else { throw PayloadError("product.purchaseStateContext", "required") }
        let c = try PayloadReader(context, path: "product.purchaseStateContext")
        let stateText = try c.string("purchaseState", maxLength: 64) ?? State.unspecified.rawValue
        guard let state = State(rawValue: stateText) else {
            throw PayloadError("product.purchaseStateContext.purchaseState", "unknown state \(stateText)")
        }
        guard let items = r.value("productLineItem")?.arrayValue ?? (r.value("productLineItem") == nil ? [] : nil), items.count <= 100
        else {
            throw PayloadError("product.productLineItem", "expected an array")
        }
        var productIds: [String] = []
        for (index, item) in items.enumerated() {
            productIds.append(try PayloadReader(item, path: "product.productLineItem[\(index)]").requiredString("productId", maxLength: 191))
        }
        var completedAt: Timestamp?
        if let text = try r.string("purchaseCompletionTime", maxLength: 40) {
            guard let time = Timestamp(iso8601: text) else {
                throw PayloadError("product.purchaseCompletionTime", "expected an RFC 3339 time, got \(text)")
            }
            completedAt = time
        }
        return GooglePlayProductPurchase(
            state: state, productIds: productIds, completedAt: completedAt,
            obfuscatedAccountId: try r.string("obfuscatedExternalAccountId", maxLength: 128),
            isTest: r.value("testPurchaseContext").map { !$0.isNull } ?? false,
            acknowledged: try r.string("acknowledgementState", maxLength: 64) == "ACKNOWLEDGEMENT_STATE_ACKNOWLEDGED",
            orderId: try r.string("orderId", maxLength: 191), payload: json)
    }
}

/// One entry of `purchases.voidedpurchases.list`: a purchase Google refunded, canceled or
/// charged back, with why (`voidedReason`) and who (`voidedSource`).
struct GooglePlayVoidedPurchase: Sendable, Equatable {
    var purchaseToken: String
    var orderId: String?
    var voidedAt: Timestamp
    /// `voidedReason` as a word (`remorse`, `chargeback`, …), `other` for a code not known.
    var reason: String?
    /// The entry as the inbox keeps it: the token replaced by its subscription id.
    var payload: JSON

    static let reasons = [
        0: "other", 1: "remorse", 2: "not_received", 3: "defective", 4: "accidental_purchase", 5: "fraud", 6: "friendly_fraud",
        7: "chargeback", 8: "unacknowledged_purchase",
    ]

    static func decode(_ json: JSON, path: String) throws(PayloadError) -> GooglePlayVoidedPurchase {
        let r = try PayloadReader(json, path: path)
        let token = try r.requiredString("purchaseToken", maxLength: 4096)
        guard !token.isEmpty else { throw PayloadError("\(path).purchaseToken", "must not be empty") }
        guard let text = try r.string("voidedTimeMillis", maxLength: 20), let ms = Int64(text), (0...253_402_300_799_999).contains(ms)
        else {
            throw PayloadError("\(path).voidedTimeMillis", "required int64 milliseconds")
        }
        let reason = try r.value("voidedReason").map { (v) throws(PayloadError) -> String in
            guard let code = v.int64Value else { throw PayloadError("\(path).voidedReason", "expected an integer") }
            return reasons[Int(code)] ?? "other"
        }
        var payload = json.objectValue ?? [:]
        payload["purchaseToken"] = nil
        payload["purchaseTokenSubscriptionId"] = .string(GooglePlayEvent.subscriptionId(token: token))
        return GooglePlayVoidedPurchase(
            purchaseToken: token, orderId: try r.string("orderId", maxLength: 191), voidedAt: Timestamp(millisecondsSinceEpoch: ms),
            reason: reason, payload: .object(payload))
    }
}

/// What the Play Developer API said of one purchase token, a subscription or a one-time
/// product: what recording, binding and acknowledging it need, whichever it is.
struct GooglePlayRead: Sendable, Equatable {
    enum Kind: String, Sendable {
        case subscription, product
    }
    enum Source: Sendable, Equatable {
        case subscription(GooglePlaySubscription)
        case product(GooglePlayProductPurchase)
    }

    var source: Source

    init(_ subscription: GooglePlaySubscription) { source = .subscription(subscription) }
    init(_ product: GooglePlayProductPurchase) { source = .product(product) }

    var kind: Kind {
        switch source {
        case .subscription: return .subscription
        case .product: return .product
        }
    }

    /// `subscriptionState`, or `purchaseState`.
    var state: String {
        switch source {
        case .subscription(let s): return s.state.rawValue
        case .product(let p): return p.state.rawValue
        }
    }

    /// The id acknowledging names: the subscription id, or the product.
    var productId: String? {
        switch source {
        case .subscription(let s): return s.lineItems.first?.productId
        case .product(let p): return p.productIds.first
        }
    }

    /// When it was bought: the three days before Google refunds it count from here.
    var startedAt: Timestamp? {
        switch source {
        case .subscription(let s): return s.startTime
        case .product(let p): return p.completedAt
        }
    }

    var acknowledged: Bool {
        switch source {
        case .subscription(let s): return s.acknowledged
        case .product(let p): return p.acknowledged
        }
    }

    /// Paid, so that it can (and must) be acknowledged.
    var isAcknowledgeable: Bool {
        switch source {
        case .subscription(let s): return s.state.isAcknowledgeable
        case .product(let p): return p.state == .purchased
        }
    }

    var obfuscatedAccountId: String? {
        switch source {
        case .subscription(let s): return s.obfuscatedAccountId
        case .product(let p): return p.obfuscatedAccountId
        }
    }

    var isTest: Bool {
        switch source {
        case .subscription(let s): return s.isTest
        case .product(let p): return p.isTest
        }
    }

    var payload: JSON {
        switch source {
        case .subscription(let s): return s.payload
        case .product(let p): return p.payload
        }
    }

    /// Whether the token is of one of the product ids the app names (`subscriptionId`,
    /// `subscriptionId:basePlanId`, or the one-time product).
    func isOf(_ productId: String) -> Bool {
        switch source {
        case .subscription(let s): return s.lineItems.contains { $0.productId == productId || $0.catalogProductId == productId }
        case .product(let p): return p.productIds.contains(productId)
        }
    }

    /// The event it states, read at `readAt` (`GooglePlayEvent`).
    func event(
        token: String, cause: String, providerEventId: String, readAt: Timestamp, tiers: TierResolver,
        catalog: [String: BillingConfiguration.Product]
    ) -> StoreEvent {
        switch source {
        case .subscription(let s):
            return GooglePlayEvent.state(s, token: token, cause: cause, providerEventId: providerEventId, readAt: readAt, tiers: tiers)
        case .product(let p):
            return GooglePlayEvent.oneTime(
                p, token: token, cause: cause, providerEventId: providerEventId, readAt: readAt, tiers: tiers, catalog: catalog)
        }
    }
}
