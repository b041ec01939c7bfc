/// The fields FCGIBilling reads from a verified `JWSTransaction` payload.
struct AppleTransactionInfo: Sendable, Equatable {
    var transactionId: String
    /// Identifies the subscription from first purchase to end: the binding key.
    var originalTransactionId: String
    var productId: String
    var environment: StoreEnvironment
    var purchaseDate: Timestamp?
    var expiresDate: Timestamp?
    var revocationDate: Timestamp?
    var revocationReason: Int64?
    /// 1 introductory, 2 promotional, 3 offer code, 4 win-back.
    var offerType: Int64?
    var offerDiscountType: String?
    /// Apple's `price`: already milli-units of `currency`.
    var priceMilli: Int64?
    var currency: String?
    /// The app's own account UUID for the buyer (lowercased), when it set one.
    var appAccountToken: String?
    /// `PURCHASED` or `FAMILY_SHARED` (a family member's access through Family Sharing).
    var inAppOwnershipType: String?
    var signedDate: Timestamp?
    /// Apple's product type: `Auto-Renewable Subscription`, `Non-Renewing Subscription`,
    /// `Consumable`, `Non-Consumable`; nil when absent (older payloads: a subscription).
    var type: String?

    /// Expiry = min(expiresDate, revocationDate).
    var effectiveExpiry: Timestamp? {
        switch (expiresDate, revocationDate) {
        case let (e?, r?): return min(e, r)
        case let (e, r): return e ?? r
        }
    }

    /// Revoked without a refund: a Family Sharing member's access withdrawn (App Store REVOKE).
    var isFamilyShared: Bool { inAppOwnershipType == "FAMILY_SHARED" }

    /// What a revoked transaction means: a refund, or a Family Sharing revocation; nil while
    /// not revoked.
    var revocationKind: EventKind? {
        revocationDate == nil ? nil : isFamilyShared ? .revoke : .refund
    }

    /// Whether it is a one-time purchase (consumable, non-consumable, non-renewing), which
    /// Apple announces with ONE_TIME_CHARGE (SPEC §15), not a period of a subscription.
    var isOneTime: Bool { type != nil && type != "Auto-Renewable Subscription" }

    /// What the transaction itself states: a one-time purchase, the first purchase of the
    /// subscription, or a renewal.
    var periodKind: EventKind {
        if isOneTime { return .nonRenewingPurchase }
        return transactionId == originalTransactionId ? .purchase : .renewal
    }

    /// An introductory offer with a free-trial discount.
    var isFreeTrial: Bool { offerType == 1 && offerDiscountType == "FREE_TRIAL" }

    /// Offer period as the inbox stores it.
    var periodType: String {
        switch offerType {
        case 1?: return isFreeTrial ? "TRIAL" : "INTRO"
        case 2?, 3?, 4?: return "PROMOTIONAL"
        default: return "NORMAL"
        }
    }

    static func decode(_ payload: JSON, path: String = "transaction") throws(PayloadError) -> AppleTransactionInfo {
        let r = try PayloadReader(payload, path: path)
        let environment: StoreEnvironment = try r.string("environment", maxLength: 32) == "Production" ? .production : .sandbox
        var currency = try r.string("currency", maxLength: 8)?.uppercased()
        if let c = currency, c.utf8.count != 3 || !c.utf8.allSatisfy({ $0 >= 65 && $0 <= 90 }) { currency = nil }
        var price = try r.value("price").map { (v) throws(PayloadError) -> Int64 in
            guard let n = v.int64Value, Money.storable.contains(n) else {
                throw PayloadError("\(path).price", "expected integer milli-units of magnitude under 10^15")
            }
            return n
        }
        if currency == nil { price = nil }
        return AppleTransactionInfo(
            transactionId: try r.requiredString("transactionId"),
            originalTransactionId: try r.requiredString("originalTransactionId"),
            productId: try r.requiredString("productId"),
            environment: environment,
            purchaseDate: try r.milliseconds("purchaseDate"),
            expiresDate: try r.milliseconds("expiresDate"),
            revocationDate: try r.milliseconds("revocationDate"),
            revocationReason: r.value("revocationReason")?.int64Value,
            offerType: r.value("offerType")?.int64Value,
            offerDiscountType: try r.string("offerDiscountType", maxLength: 32),
            priceMilli: price, currency: price == nil ? nil : currency,
            appAccountToken: try r.string("appAccountToken", maxLength: 64)?.lowercased(),
            inAppOwnershipType: try r.string("inAppOwnershipType", maxLength: 32)?.uppercased(),
            signedDate: try r.milliseconds("signedDate"),
            type: try r.string("type", maxLength: 64))
    }
}

/// The fields FCGIBilling reads from a verified `JWSRenewalInfo` payload.
struct AppleRenewalInfo: Sendable, Equatable {
    var willRenew: Bool?
    var autoRenewProductId: String?
    var gracePeriodExpiresDate: Timestamp?
    var isInBillingRetryPeriod: Bool
    /// Why the subscription expired (1 voluntary, 2 billing error, 3 price increase
    /// declined, 4 product unavailable, 5 other); absent while it has not.
    var expirationIntent: Int?

    static func decode(_ payload: JSON) throws(PayloadError) -> AppleRenewalInfo {
        let r = try PayloadReader(payload, path: "renewalInfo")
        return AppleRenewalInfo(
            willRenew: r.value("autoRenewStatus")?.int64Value.map { $0 == 1 },
            autoRenewProductId: try r.string("autoRenewProductId", maxLength: 191),
            gracePeriodExpiresDate: try r.milliseconds("gracePeriodExpiresDate"),
            isInBillingRetryPeriod: try r.bool("isInBillingRetryPeriod") ?? false,
            expirationIntent: r.value("expirationIntent")?.int64Value.flatMap { (1...99).contains($0) ? Int($0) : nil })
    }
}
