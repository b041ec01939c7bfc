/// A Play subscription as the Play Developer API states it (SPEC §18): the
/// `SubscriptionPurchaseV2` of `purchases.subscriptionsv2.get`, decoded strictly (a field of
/// the wrong type is refused; fields this server does not use are ignored, as Google adds
/// some every year), and what it means for access.
///
/// States: ACTIVE (access, renewing or not), CANCELED (access until the expiry: the user
/// turned renewal off), IN_GRACE_PERIOD (access: the payment is retried), ON_HOLD (no access:
/// the payment failed after grace; Play retries for up to 30 days), PAUSED (no access until
/// it resumes), EXPIRED, PENDING and PENDING_PURCHASE_CANCELED (no access: never paid).
struct GooglePlaySubscription: Sendable, Equatable {
    enum State: String, Sendable, CaseIterable {
        case unspecified = "SUBSCRIPTION_STATE_UNSPECIFIED"
        case pending = "SUBSCRIPTION_STATE_PENDING"
        case active = "SUBSCRIPTION_STATE_ACTIVE"
        case paused = "SUBSCRIPTION_STATE_PAUSED"
        case inGracePeriod = "SUBSCRIPTION_STATE_IN_GRACE_PERIOD"
        case onHold = "SUBSCRIPTION_STATE_ON_HOLD"
        case canceled = "SUBSCRIPTION_STATE_CANCELED"
        case expired = "SUBSCRIPTION_STATE_EXPIRED"
        case pendingPurchaseCanceled = "SUBSCRIPTION_STATE_PENDING_PURCHASE_CANCELED"
    }

    /// One `lineItems[]` entry: a product (the subscription id) at a base plan, maybe an offer.
    struct LineItem: Sendable, Equatable {
        var productId: String
        var basePlanId: String?
        var offerId: String?
        var expiryTime: Timestamp?
        /// `autoRenewingPlan.autoRenewEnabled`; nil for a prepaid plan.
        var autoRenewEnabled: Bool?
        /// `offerPhase`: `freeTrial`, `introductoryPrice`, `prorationPeriod` or `basePrice`.
        var offerPhase: String?
        /// `autoRenewingPlan.recurringPrice` in thousandths of `currency` (Google's Money:
        /// `units` and `nanos`), when Play states it.
        var priceMilli: Int64? = nil
        var currency: String? = nil
        /// `latestSuccessfulOrderId`: the order of the item's current paid period (a renewal's
        /// is the first order's id with `..N` appended).
        var latestSuccessfulOrderId: String? = nil

        /// The catalog's key for it: `subscriptionId:basePlanId` (SPEC §18), or the id alone.
        var catalogProductId: String { basePlanId.map { "\(productId):\($0)" } ?? productId }
        var isFreeTrial: Bool { offerPhase == "freeTrial" }
    }

    var state: State
    var lineItems: [LineItem]
    var startTime: Timestamp?
    /// The token this one replaces (an upgrade, a downgrade, a re-signup): never counted twice.
    var linkedPurchaseToken: String?
    /// `externalAccountIdentifiers.obfuscatedExternalAccountId`: the app sets it to the user id.
    var obfuscatedAccountId: String?
    /// `testPurchase` present: a license tester's purchase (sandbox here).
    var isTest: Bool
    var acknowledged: Bool
    var latestOrderId: String?
    var regionCode: String?
    /// Who canceled, from `canceledStateContext`: user, system, developer or replacement.
    var canceledBy: String?
    /// The answer as the inbox keeps it: `linkedPurchaseToken` (another credential of the
    /// user) replaced by `linkedSubscriptionId`, the subscription id it names.
    var payload: JSON = .null

    /// The latest expiry among the line items.
    var expiresAt: Timestamp? { lineItems.compactMap(\.expiryTime).max() }

    /// Whether the user has the product's access at `t`: the states that keep it, until expiry.
    func grantsAccess(at t: Timestamp) -> Bool {
        guard [.active, .canceled, .inGracePeriod].contains(state), let expiresAt else { return false }
        return t < expiresAt
    }

    /// Whether it renews: some line item's auto-renewing plan has renewal on.
    var willRenew: Bool { lineItems.contains { $0.autoRenewEnabled == true } }

    static func decode(_ json: JSON) throws(PayloadError) -> GooglePlaySubscription {
        let r = try PayloadReader(json, path: "subscription")
        guard let stateText = try r.string("subscriptionState", maxLength: 64) else {
            throw PayloadError("subscription.subscriptionState", "required")
        }
        guard let state = State(rawValue: stateText) else {
            throw PayloadError("subscription.subscriptionState", "unknown state \(stateText)")
        }
        guard let items = r.value("lineItems")?.arrayValue ?? (r.value("lineItems") == nil ? [] : nil) else {
            throw PayloadError("subscription.lineItems", "expected an array")
        }
        var lineItems: [LineItem] = []
        for (index, item) in items.enumerated() {
            let path = "subscription.lineItems[\(index)]"
            let i = try PayloadReader(item, path: path)
            let productId = try i.requiredString("productId", maxLength: 191)
            let offer = try i.value("offerDetails").map { (v) throws(PayloadError) in try PayloadReader(v, path: "\(path).offerDetails") }
            let plan = try i.value("autoRenewingPlan").map { (v) throws(PayloadError) in
                try PayloadReader(v, path: "\(path).autoRenewingPlan")
            }
            var phase: String?
            if let value = i.value("offerPhase") {
                guard let object = value.objectValue else { throw PayloadError("\(path).offerPhase", "expected an object") }
                phase = ["freeTrial", "introductoryPrice", "prorationPeriod", "basePrice"].first { object[$0] != nil }
            }
            let (priceMilli, currency) = try Self.money(plan?.value("recurringPrice"), path: "\(path).autoRenewingPlan.recurringPrice")
            lineItems.append(
                LineItem(
                    productId: productId, basePlanId: try offer?.string("basePlanId", maxLength: 64),
                    offerId: try offer?.string("offerId", maxLength: 64), expiryTime: try Self.time(i, "expiryTime", path: path),
                    autoRenewEnabled: try plan?.bool("autoRenewEnabled") ?? (plan == nil ? nil : false), offerPhase: phase,
                    priceMilli: priceMilli, currency: currency,
                    latestSuccessfulOrderId: try i.string("latestSuccessfulOrderId", maxLength: 191)))
        }
        let accounts = try r.value("externalAccountIdentifiers").map { (v) throws(PayloadError) in
            try PayloadReader(v, path: "subscription.externalAccountIdentifiers")
        }
        var canceledBy: String?
        if let context = r.value("canceledStateContext")?.objectValue {
            canceledBy =
                [
                    ("userInitiatedCancellation", "user"), ("systemInitiatedCancellation", "system"),
                    ("developerInitiatedCancellation", "developer"), ("replacementCancellation", "replacement"),
                ].first { context[$0.0] != nil }?.1
        }
        let acknowledgement = try r.string("acknowledgementState", maxLength: 64)
        return GooglePlaySubscription(
            state: state, lineItems: lineItems, startTime: try Self.time(r, "startTime", path: "subscription"),
            linkedPurchaseToken: try r.string("linkedPurchaseToken", maxLength: 4096),
            obfuscatedAccountId: try accounts?.string("obfuscatedExternalAccountId", maxLength: 128),
            isTest: r.value("testPurchase").map { !$0.isNull } ?? false,
            acknowledged: acknowledgement == "ACKNOWLEDGEMENT_STATE_ACKNOWLEDGED",
            latestOrderId: try r.string("latestOrderId", maxLength: 191), regionCode: try r.string("regionCode", maxLength: 8),
            canceledBy: canceledBy, payload: storedPayload(json))
    }

    private static func storedPayload(_ json: JSON) -> JSON {
        guard var object = json.objectValue else { return json }
        if let linked = object["linkedPurchaseToken"]?.stringValue {
            object["linkedPurchaseToken"] = nil
            object["linkedSubscriptionId"] = .string(GooglePlayEvent.subscriptionId(token: linked))
        }
        return .object(object)
    }

    /// Google's `Money` (`currencyCode`, `units` as a decimal string, `nanos`) in
    /// thousandths, rounded half away from zero once; nil for an absent one or a code that is
    /// not three capital letters.
    private static func money(_ value: JSON?, path: String) throws(PayloadError) -> (Int64?, String?) {
        guard let value else { return (nil, nil) }
        let m = try PayloadReader(value, path: path)
        guard let code = try m.string("currencyCode", maxLength: 3), code.utf8.count == 3,
            code.utf8.allSatisfy({ $0 >= 65 && $0 <= 90 })
        else { return (nil, nil) }
        let units: Int64
        switch m.value("units") {
        case nil: units = 0
        case .string(let text)?:
            guard let parsed = Int64(text), abs(parsed) < 1_000_000_000_000 else { throw PayloadError("\(path).units", "expected an int64 string") }
            units = parsed
        case let other?:
            guard let parsed = other.int64Value, abs(parsed) < 1_000_000_000_000 else {
                throw PayloadError("\(path).units", "expected an int64 string")
            }
            units = parsed
        }
        let nanos =
            try m.value("nanos").map { (v) throws(PayloadError) -> Int64 in
                guard let n = v.int64Value, abs(n) < 1_000_000_000 else { throw PayloadError("\(path).nanos", "expected an integer below 10⁹") }
                return n
            } ?? 0
        let milli = (abs(nanos) + 500_000) / 1_000_000
        return (units * 1000 + (nanos < 0 ? -milli : milli), code)
    }

    /// An RFC 3339 time (Google writes up to nine fractional digits and `Z`).
    private static func time(_ reader: PayloadReader, _ key: String, path: String) throws(PayloadError) -> Timestamp? {
        guard let text = try reader.string(key, maxLength: 40) else { return nil }
        guard let time = Timestamp(iso8601: text) else { throw PayloadError("\(path).\(key)", "expected an RFC 3339 time, got \(text)") }
        return time
    }

    /// What `google.purchases.get` answers of it at `now` (no token, no order id: those are
    /// the user's credentials at Google).
    func json(now: Timestamp) -> JSON {
        [
            "state": .string(state.rawValue),
            "grantsAccess": .bool(grantsAccess(at: now)),
            "willRenew": .bool(willRenew),
            "expiresAt": JSON(expiresAt?.iso8601),
            "startTime": JSON(startTime?.iso8601),
            "acknowledged": .bool(acknowledged),
            "environment": .string(isTest ? "sandbox" : "production"),
            "userId": JSON(obfuscatedAccountId),
            "replacesAnotherToken": .bool(linkedPurchaseToken != nil),
            "canceledBy": JSON(canceledBy),
            "regionCode": JSON(regionCode),
            "lineItems": .array(
                lineItems.map { item in
                    [
                        "productId": .string(item.productId), "basePlanId": JSON(item.basePlanId), "offerId": JSON(item.offerId),
                        "catalogProductId": .string(item.catalogProductId), "expiryTime": JSON(item.expiryTime?.iso8601),
                        "autoRenewEnabled": item.autoRenewEnabled.map(JSON.bool) ?? .null, "offerPhase": JSON(item.offerPhase),
                    ]
                }),
        ]
    }
}
