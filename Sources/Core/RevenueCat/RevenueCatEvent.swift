/// A RevenueCat webhook body, decoded and normalized (SPEC §5, seeds/000).
///
/// `{"api_version": "1.0", "event": {...}}`: the event becomes a provider-neutral
/// `StoreEvent`; the ids that may name a user (`app_user_id`, `original_app_user_id`,
/// `aliases`, filtered by `users.idPattern`) become candidates for matching.
struct RevenueCatDelivery: Sendable {
    var event: StoreEvent
    /// Ids that may name the subject user, in preference order, without duplicates.
    var userCandidates: [String]
    /// The event object as received (stored whole in the inbox).
    var payload: StoredPayload

    /// Decodes a webhook body. Throws `PayloadError` (→ 400) only for a body that can never
    /// be applied; unknown event types decode fine (kind `.unknown`).
    ///
    /// - Parameter eventText: the `event` member's text as the request's parser serialized
    ///   it (`HTTPRequest.jsonBody(limits:serializingMember:)`), stored as the payload; when
    ///   nil the event value is serialized when the row is written.
    static func decode(
        _ body: JSON, tiers: TierResolver, idPattern: UserIdPattern,
        eventText: [UInt8]? = nil
    ) throws(PayloadError) -> RevenueCatDelivery {
        let root = try PayloadReader(body, path: "")
        guard let eventValue = root.value("event") else { throw PayloadError("event", "required object") }
        let e = try PayloadReader(eventValue, path: "event")
        let id = try e.requiredString("id")
        let type = try e.requiredString("type", maxLength: 64).uppercased()

        let expiresAt = try e.milliseconds("expiration_at_ms")
        let intrinsicAt = try e.milliseconds("event_timestamp_ms") ?? expiresAt
        let productId = try e.string("product_id", maxLength: 191)
        var entitlements = try e.stringArray("entitlement_ids")
        if let single = try e.string("entitlement_id") { entitlements.append(single) }
        let periodType = try e.string("period_type", maxLength: 32)?.uppercased()
        let cancelReason = try e.string("cancel_reason", maxLength: 64)?.uppercased()
        let newProductId = try e.string("new_product_id", maxLength: 191)

        let environment: StoreEnvironment
        switch try e.string("environment", maxLength: 32)?.uppercased() {
        case nil, "PRODUCTION": environment = .production
        case "SANDBOX": environment = .sandbox
        default: throw PayloadError("event.environment", "expected PRODUCTION or SANDBOX")
        }

        // `price_in_purchased_currency` is in `currency`; `price` is RevenueCat's USD value.
        // The inbox only stores a price with its ISO 4217 code (CHECK constraints): an empty
        // currency is no currency, a code of another shape is refused here (400) rather than
        // by the database (a 500 the provider would retry forever), and a local price without
        // any code is dropped.
        var priceMilli: Int64?
        var currency = try e.string("currency", maxLength: 3)?.uppercased()
        if currency == "" { currency = nil }
        if let code = currency, !(code.utf8.count == 3 && code.utf8.allSatisfy({ $0 >= 65 && $0 <= 90 })) {
            throw PayloadError("event.currency", "expected an ISO 4217 code of three letters")
        }
        if let price = try e.number("price_in_purchased_currency"), currency != nil {
            priceMilli = Int64((price * 1000).rounded())
        } else if let usd = try e.number("price") {
            priceMilli = Int64((usd * 1000).rounded())
            currency = "USD"
        }

        let kind: EventKind
        switch type {
        case "INITIAL_PURCHASE": kind = .purchase
        case "RENEWAL": kind = .renewal
        case "CANCELLATION":
            // CUSTOMER_SUPPORT is a refund; BILLING_ERROR is a failed charge, sent beside
            // BILLING_ISSUE: never a decision to leave (SPEC §5).
            switch cancelReason {
            case "CUSTOMER_SUPPORT": kind = .refund
            case "BILLING_ERROR": kind = .billingIssue
            default: kind = .cancellation
            }
        case "UNCANCELLATION": kind = .uncancellation
        case "EXPIRATION": kind = .expiration
        case "BILLING_ISSUE": kind = .billingIssue
        case "PRODUCT_CHANGE": kind = .productChange
        case "NON_RENEWING_PURCHASE": kind = .nonRenewingPurchase
        case "SUBSCRIPTION_EXTENDED": kind = .extension
        case "SUBSCRIPTION_PAUSED": kind = .pause
        case "TEMPORARY_ENTITLEMENT_GRANT": kind = .temporaryGrant
        case "REFUND_REVERSED": kind = .refundReversed
        case "PROMOTIONAL": kind = .promotional
        case "TRANSFER": kind = .transfer
        case "TEST": kind = .test
        // Informational (SPEC §15): stored under their own kind, answered 200, never folded.
        case "INVOICE_ISSUANCE": kind = .invoiceIssuance
        case "VIRTUAL_CURRENCY_TRANSACTION": kind = .virtualCurrencyTransaction
        case "EXPERIMENT_ENROLLMENT": kind = .experimentEnrollment
        case "SUBSCRIBER_ALIAS": kind = .subscriberAlias
        default: kind = .unknown
        }

        let store = try e.string("store", maxLength: 32)?.lowercased()
        let event = StoreEvent(
            provider: .revenuecat, providerEventId: id, rawType: type, kind: kind, intrinsicAt: intrinsicAt,
            subscriptionId: try e.string("original_transaction_id", maxLength: 191),
            productId: productId,
            tier: tiers.tier(entitlementIds: entitlements, productId: productId),
            periodType: periodType, isTrial: periodType == "TRIAL", environment: environment,
            platform: store == "promotional" ? "promotional" : store,
            purchasedAt: try e.milliseconds("purchased_at_ms"), expiresAt: expiresAt,
            graceExpiresAt: try e.milliseconds("grace_period_expiration_at_ms"),
            priceMilli: priceMilli, currency: priceMilli == nil ? nil : currency,
            cancelReason: cancelReason, newProductId: newProductId,
            newTier: newProductId.flatMap { tiers.tier(entitlementIds: [], productId: $0) },
            transferredFrom: try e.stringArray("transferred_from").filter(idPattern.matches),
            transferredTo: try e.stringArray("transferred_to").filter(idPattern.matches),
            familyShared: try e.bool("is_family_share") ?? false)

        var candidates: [String] = []
        let appUserId = try e.string("app_user_id", maxLength: 512)
        let originalAppUserId = try e.string("original_app_user_id", maxLength: 512)
        let ids = [appUserId, originalAppUserId].compactMap { $0 } + (try e.stringArray("aliases"))
        for candidate in ids where idPattern.matches(candidate) && !candidates.contains(candidate) {
            candidates.append(candidate)
        }
        return RevenueCatDelivery(event: event, userCandidates: candidates, payload: eventText.map(StoredPayload.text) ?? .value(eventValue))
    }
}

/// Maps entitlement ids and product ids to tiers: entitlement ids by the configured
/// lowercase substring rules (`pro` → pro, `plus` → plus), products by the catalog, then
/// by the same rules on the product id. The highest tier named wins.
struct TierResolver: Sendable {
    var rules: [(match: String, tier: Tier)]
    var products: [String: BillingConfiguration.Product]

    init(rules: [(match: String, tier: Tier)], products: [String: BillingConfiguration.Product]) {
        self.rules = rules
        self.products = products
    }

    init(_ config: BillingConfiguration) {
        self.init(rules: config.revenuecat.entitlementTiers, products: config.products)
    }

    func tier(entitlementIds: [String], productId: String?) -> Tier? {
        let fromEntitlements = entitlementIds.compactMap(match).max()
        if let fromEntitlements { return fromEntitlements }
        guard let productId else { return nil }
        if let product = products[productId] { return product.tier }
        return match(productId)
    }

    /// The first rule whose `match` occurs in the lower-cased id. Ids are ASCII in practice:
    /// those are folded and searched byte-wise, without building a lower-cased copy; any
    /// other id is lower-cased the Unicode way first, as before.
    private func match(_ id: String) -> Tier? {
        let found: (match: String, tier: Tier)?
        if id.utf8.allSatisfy({ $0 < 0x80 }) {
            found = rules.first { rule in Self.asciiLowercased(id.utf8, contains: rule.match.utf8) }
        } else {
            let lower = id.lowercased()
            found = rules.first { lower.contains($0.match) }
        }
        return found?.tier
    }

    private static func asciiLowercased(_ haystack: String.UTF8View, contains needle: String.UTF8View) -> Bool {
        guard !needle.isEmpty else { return true }
        let hay = Array(haystack)
        let pattern = Array(needle)
        guard hay.count >= pattern.count else { return false }
        for start in 0...(hay.count - pattern.count) {
            var index = 0
            while index < pattern.count, hay[start + index].asciiLowercased == pattern[index] { index += 1 }
            if index == pattern.count { return true }
        }
        return false
    }
}
