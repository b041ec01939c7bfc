/// Who delivered an event into the inbox.
enum EventProvider: String, Sendable, CaseIterable {
    case revenuecat
    /// Subscriber state read from RevenueCat's REST API (SPEC §15), not pushed by it.
    case revenuecatPull = "revenuecat_pull"
    case appleNotification = "apple_notification"
    case appleTransaction = "apple_transaction"
    /// A Google Play subscription's state read from the Play Developer API (SPEC §18), after a
    /// push, the app's post or a pull.
    case googlePlay = "google_play"

    /// Whether the App Store itself signed what the event says (a notification, a posted
    /// or pulled transaction), rather than RevenueCat relaying it.
    var isApple: Bool { self == .appleNotification || self == .appleTransaction }
}

enum StoreEnvironment: String, Sendable, CaseIterable {
    case production, sandbox
}

/// What an event means, across providers. The raw provider type is kept beside it.
enum EventKind: String, Sendable, CaseIterable {
    case purchase  // first purchase of a subscription (trial or paid)
    case renewal  // a new period (incl. trial conversion, confirmed plan change)
    case cancellation  // auto-renew turned off: access stays until expiry
    case uncancellation  // auto-renew turned back on
    case expiration  // the subscription ended
    case billingIssue = "billing_issue"  // payment failed: grace or billing retry
    case productChange = "product_change"  // a pending change of product (informative)
    case nonRenewingPurchase = "non_renewing_purchase"
    case `extension`  // expiry moved later by the store
    case pause  // will pause at the next renewal
    case temporaryGrant = "temporary_grant"  // store outage: temporary access
    case refund  // money returned: access its transaction granted ends at the revocation
    case revoke  // access withdrawn without a refund (App Store family sharing): ends like a refund
    case refundReversed = "refund_reversed"
    case promotional  // store-side promotional access
    case transfer  // purchases moved between app users
    case priceIncrease = "price_increase"  // informational (App Store PRICE_INCREASE): only renewal info applies
    /// A subscription's whole state as RevenueCat's REST API answered it (SPEC §15): period,
    /// renewal intent, billing issue and grace, as of the request.
    case subscriberState = "subscriber_state"
    // Informational types (SPEC §15): stored with their own kind and answered 200. An App
    // Store one that carries a verified transaction still states its period and expiry, and
    // its renewal info applies, as for a type the server does not know.
    case consumptionRequest = "consumption_request"  // App Store CONSUMPTION_REQUEST
    case refundDeclined = "refund_declined"  // App Store REFUND_DECLINED
    case renewalExtension = "renewal_extension"  // App Store RENEWAL_EXTENSION (a summary of a mass extension)
    case externalPurchaseToken = "external_purchase_token"  // App Store EXTERNAL_PURCHASE_TOKEN
    case consentRescinded = "consent_rescinded"  // App Store RESCIND_CONSENT
    case metadataUpdate = "metadata_update"  // App Store METADATA_UPDATE
    case migration  // App Store MIGRATION
    case priceChange = "price_change"  // App Store PRICE_CHANGE
    case invoiceIssuance = "invoice_issuance"  // RevenueCat INVOICE_ISSUANCE
    case virtualCurrencyTransaction = "virtual_currency_transaction"  // RevenueCat VIRTUAL_CURRENCY_TRANSACTION
    case experimentEnrollment = "experiment_enrollment"  // RevenueCat EXPERIMENT_ENROLLMENT
    case subscriberAlias = "subscriber_alias"  // RevenueCat SUBSCRIBER_ALIAS
    case test
    /// A type the server does not know. Stored and answered 200; applied only when it
    /// carries a verified App Store transaction (its period and expiry still count).
    case unknown

    /// A kind that tells about the store, not a change of the subscription, and `unknown`:
    /// never applied on its own; an App Store one still folds the transaction it carries
    /// (its period and expiry, and its renewal info).
    var isInformational: Bool {
        switch self {
        case .consumptionRequest, .refundDeclined, .renewalExtension, .externalPurchaseToken, .consentRescinded,
            .metadataUpdate, .migration, .priceChange, .invoiceIssuance, .virtualCurrencyTransaction,
            .experimentEnrollment, .subscriberAlias, .unknown:
            return true
        default:
            return false
        }
    }
}

/// One normalized store event: what the fold needs, provider-independent. Built by the
/// RevenueCat and App Store decoders; stored in `billing_events` columns.
struct StoreEvent: Sendable, Equatable {
    var provider: EventProvider
    /// RevenueCat `event.id`, Apple `notificationUUID`, or a client `transactionId`.
    var providerEventId: String
    var rawType: String
    var kind: EventKind
    /// Ordering key: the provider's own event time. Events without one are never applied.
    var intrinsicAt: Timestamp?
    /// The subscription's identity (`original_transaction_id` / `originalTransactionId`).
    var subscriptionId: String?
    var productId: String?
    var tier: Tier?
    /// RevenueCat `period_type` or the App Store offer type, upper-cased (TRIAL, INTRO, NORMAL, …).
    var periodType: String?
    var isTrial: Bool
    /// Shared through Family Sharing (App Store `inAppOwnershipType` FAMILY_SHARED, RevenueCat
    /// `is_family_share` / `ownership_type`): it grants access, but statistics count it as
    /// neither a payer nor revenue (SPEC §15).
    var familyShared: Bool
    var environment: StoreEnvironment
    /// Who manages the subscription (`app_store`, `play_store`, `stripe`, `promotional`, …).
    var platform: String?
    var purchasedAt: Timestamp?
    var expiresAt: Timestamp?
    var graceExpiresAt: Timestamp?
    /// Price in thousandths of `currency`.
    var priceMilli: Int64?
    var currency: String?
    var cancelReason: String?
    /// For product changes: the product the subscription changes to, and its tier.
    var newProductId: String?
    var newTier: Tier?
    /// For product changes, when the change takes effect if known.
    var effectiveAt: Timestamp?
    /// Auto-renew state carried by the event, when the provider says it (App Store renewal info).
    var willRenew: Bool?
    /// App Store renewal info `isInBillingRetryPeriod`, when the event carries renewal info:
    /// the store is retrying a failed charge (with access while `graceExpiresAt` lies ahead).
    var inBillingRetry: Bool?
    /// App Store renewal info `expirationIntent` (1 voluntary, 2 billing error, 3 price
    /// increase declined, 4 product unavailable, 5 other), when the subscription has expired.
    var expirationIntent: Int?
    /// For transfers: the app user ids that lose their store access, and those that gain it.
    var transferredFrom: [String]
    var transferredTo: [String]
    /// Google Play: the subscription this one replaces (`linkedPurchaseToken`: an upgrade, a
    /// downgrade, a re-signup); the fold ends it, so it is never counted twice.
    var replacesSubscriptionId: String?
    /// The store transaction the event is about, when it names one
    /// (`billing_events.transaction_id`): a Google Play state's order of its paid period.
    var transactionId: String?

    init(
        provider: EventProvider, providerEventId: String, rawType: String, kind: EventKind,
        intrinsicAt: Timestamp?, subscriptionId: String? = nil, productId: String? = nil, tier: Tier? = nil,
        periodType: String? = nil, isTrial: Bool = false, environment: StoreEnvironment = .production,
        platform: String? = nil, purchasedAt: Timestamp? = nil, expiresAt: Timestamp? = nil,
        graceExpiresAt: Timestamp? = nil, priceMilli: Int64? = nil, currency: String? = nil,
        cancelReason: String? = nil, newProductId: String? = nil, newTier: Tier? = nil,
        effectiveAt: Timestamp? = nil, willRenew: Bool? = nil, inBillingRetry: Bool? = nil,
        expirationIntent: Int? = nil, transferredFrom: [String] = [], transferredTo: [String] = [],
        familyShared: Bool = false, replacesSubscriptionId: String? = nil, transactionId: String? = nil
    ) {
        self.provider = provider
        self.providerEventId = providerEventId
        self.rawType = rawType
        self.kind = kind
        self.intrinsicAt = intrinsicAt
        self.subscriptionId = subscriptionId
        self.productId = productId
        self.tier = tier
        self.periodType = periodType
        self.isTrial = isTrial
        self.familyShared = familyShared
        self.environment = environment
        self.platform = platform
        self.purchasedAt = purchasedAt
        self.expiresAt = expiresAt
        self.graceExpiresAt = graceExpiresAt
        self.priceMilli = priceMilli
        self.currency = currency
        self.cancelReason = cancelReason
        self.newProductId = newProductId
        self.newTier = newTier
        self.effectiveAt = effectiveAt
        self.willRenew = willRenew
        self.inBillingRetry = inBillingRetry
        self.expirationIntent = expirationIntent
        self.transferredFrom = transferredFrom
        self.transferredTo = transferredTo
        self.replacesSubscriptionId = replacesSubscriptionId
        self.transactionId = transactionId
    }

    /// Whether the fold may apply this event at all: it needs an intrinsic time; tests never
    /// change access, nor do unknown types unless they carry a verified App Store
    /// transaction (SPEC §5: every notification carrying a transaction updates its
    /// subscription, including types the server does not know).
    var isApplicable: Bool {
        guard intrinsicAt != nil, kind != .test else { return false }
        return !kind.isInformational || (provider.isApple && subscriptionId != nil)
    }
}

/// The deterministic order of the fold: intrinsic time, then provider event id (so two
/// events at the same millisecond still fold the same way whatever their arrival order).
func foldOrder(_ a: StoreEvent, _ b: StoreEvent) -> Bool {
    let ta = a.intrinsicAt?.millisecondsSinceEpoch ?? .min
    let tb = b.intrinsicAt?.millisecondsSinceEpoch ?? .min
    if ta != tb { return ta < tb }
    if a.providerEventId != b.providerEventId { return a.providerEventId < b.providerEventId }
    return a.provider.rawValue < b.provider.rawValue
}
