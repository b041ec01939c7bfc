/// App Store data decoded into the provider-neutral `StoreEvent` (SPEC §5): a notification
/// (`apple_notification`, keyed by `notificationUUID`) or a transaction the app posted
/// (`apple_transaction`, keyed by `transactionId`).
///
/// Kinds: SUBSCRIBED → purchase; DID_RENEW (incl. BILLING_RECOVERY) → renewal;
/// DID_CHANGE_RENEWAL_STATUS → cancellation / uncancellation; DID_CHANGE_RENEWAL_PREF
/// UPGRADE → renewal (its transaction is the confirmed new product), DOWNGRADE → pending
/// change at expiry, no subtype → product change back to the current product (cancels the
/// pending one); DID_FAIL_TO_RENEW → billing issue (grace until `gracePeriodExpiresDate`
/// with GRACE_PERIOD, else billing retry); GRACE_PERIOD_EXPIRED → billing issue without
/// grace; EXPIRED → expiration; REFUND → refund, REVOKE (Family Sharing) → revoke (access
/// its transaction granted ends at `revocationDate`); REFUND_REVERSED; RENEWAL_EXTENDED →
/// extension; OFFER_REDEEMED by subtype; PRICE_INCREASE → informational; TEST → test;
/// anything else → unknown: stored, and applied as its transaction's period and expiry when
/// it carries one. Renewal info, on any type, sets auto-renew, grace or billing retry and
/// the pending product. Tier comes from the `products` catalog only: other products grant nothing.
struct AppleDelivery: Sendable {
    var event: StoreEvent
    /// The verified transaction, when the delivery carries one.
    var transaction: AppleTransactionInfo?
    /// Ids that may name the buyer: the `appAccountToken` when it matches `users.idPattern`.
    var userCandidates: [String]
    /// What the inbox stores: decoded payloads (nested JWS replaced by their verified payloads).
    var payload: JSON

    typealias Catalog = [String: BillingConfiguration.Product]

    /// Verifies and decodes a notification `signedPayload` (outer and nested JWS).
    /// Throws `AppleVerificationError` (→ 422, quarantine) or `PayloadError` (→ 400).
    static func notification(
        signedPayload: String, verifier: AppleSignedDataVerifier, catalog: Catalog,
        idPattern: UserIdPattern, now: Timestamp
    ) throws -> AppleDelivery {
        let outer = try verifier.verifyNotification(signedPayload, now: now)
        let r = try PayloadReader(outer, path: "")
        let uuid = try r.requiredString("notificationUUID", maxLength: 64)
        let type = try r.requiredString("notificationType", maxLength: 40).uppercased()
        let subtype = try r.string("subtype", maxLength: 23)?.uppercased()
        let signedDate = try r.milliseconds("signedDate")

        var stored = outer
        var transaction: AppleTransactionInfo?
        var renewal: AppleRenewalInfo?
        let dataEnvironment = AppleSignedDataVerifier.notificationEnvironment(outer)
        if let dataValue = r.value("data"), case .object(var data) = dataValue {
            do {
                if let jws = data["signedTransactionInfo"]?.stringValue {
                    let payload = try verifier.verifyTransaction(jws, now: now)
                    transaction = try AppleTransactionInfo.decode(payload)
                    data["signedTransactionInfo"] = nil
                    data["transactionInfo"] = payload
                }
                if let jws = data["signedRenewalInfo"]?.stringValue {
                    let payload = try verifier.verifyRenewalInfo(jws, now: now)
                    renewal = try AppleRenewalInfo.decode(payload)
                    data["signedRenewalInfo"] = nil
                    data["renewalInfo"] = payload
                }
            } catch var error as AppleVerificationError {
                // A nested JWS failing a setting is this notification's mismatch (one quarantine row).
                error.notificationUUID = uuid
                error.notificationType = type
                throw error
            }
            if case .object(var object) = stored {
                object["data"] = .object(data)
                stored = .object(object)
            }
        }

        // A type that changes a subscription needs its transaction; one that informs (or a
        // test) is recorded under its own kind with or without one.
        let named = notificationKind(type: type, subtype: subtype)
        let kind = transaction == nil && !(named == .test || named.isInformational) ? .unknown : named
        var event = makeEvent(
            provider: .appleNotification, id: uuid, rawType: subtype.map { "\(type)/\($0)" } ?? type,
            kind: kind, at: signedDate, transaction: transaction, catalog: catalog,
            environment: transaction?.environment ?? dataEnvironment)
        event.cancelReason = subtype
        if transaction == nil, let summary = outer["summary"]?.objectValue {
            // RENEWAL_EXTENSION/SUMMARY: which product a mass extension was for; each
            // extended subscription comes as its own RENEWAL_EXTENDED.
            event.productId = summary["productId"]?.stringValue.map { $0.utf8Prefix(191) }
        }
        if let renewal { apply(renewal, to: &event, transaction: transaction, catalog: catalog) }
        if type == "GRACE_PERIOD_EXPIRED" {
            // The grace period is over as of this notification, whatever the renewal info says.
            event.graceExpiresAt = [event.graceExpiresAt, signedDate].compactMap { $0 }.min()
        }
        if renewal == nil, kind == .productChange {
            event.newProductId = transaction?.productId
            event.newTier = event.newProductId.flatMap { catalog[$0]?.tier }
            event.effectiveAt = transaction?.expiresDate
        }
        switch kind {
        case .cancellation: event.willRenew = false
        case .uncancellation: event.willRenew = true
        default: break
        }
        return AppleDelivery(
            event: event, transaction: transaction,
            userCandidates: candidates(transaction, idPattern: idPattern), payload: stored)
    }

    /// Verifies and decodes a transaction the app posted. Its intrinsic time is the
    /// transaction's own `signedDate`.
    static func postedTransaction(
        _ jws: String, verifier: AppleSignedDataVerifier, catalog: Catalog,
        idPattern: UserIdPattern, now: Timestamp
    ) throws -> AppleDelivery {
        let payload = try verifier.verifyTransaction(jws, now: now)
        let t = try AppleTransactionInfo.decode(payload)
        let kind = t.revocationKind ?? t.periodKind
        let event = makeEvent(
            provider: .appleTransaction, id: t.transactionId, rawType: "TRANSACTION", kind: kind,
            at: t.signedDate, transaction: t, catalog: catalog, environment: t.environment)
        return AppleDelivery(
            event: event, transaction: t, userCandidates: candidates(t, idPattern: idPattern),
            payload: ["transactionInfo": payload])
    }

    /// Renewal info counts wherever it arrives (SPEC §5): auto-renew, billing retry and
    /// grace, the product it renews to, why it expired.
    private static func apply(
        _ renewal: AppleRenewalInfo, to event: inout StoreEvent, transaction: AppleTransactionInfo?,
        catalog: Catalog
    ) {
        event.willRenew = renewal.willRenew
        event.inBillingRetry = renewal.isInBillingRetryPeriod
        event.graceExpiresAt = renewal.gracePeriodExpiresDate
        event.expirationIntent = renewal.expirationIntent
        event.newProductId = renewal.autoRenewProductId ?? (event.kind == .productChange ? transaction?.productId : nil)
        event.newTier = event.newProductId.flatMap { catalog[$0]?.tier }
        event.effectiveAt = transaction?.expiresDate
    }

    // MARK: pulled from the App Store Server API (Reconciliation)

    /// A transaction of Get Transaction History, already verified (`payload`). Apple signs
    /// every answer when it is made, so its `signedDate` is the time of the pull: the event
    /// folds at the time of what it states instead — its revocation, else its period's
    /// start — so a history page never outranks renewal info stated after that. Keyed by
    /// `transactionId` (the key of the same transaction posted by the app: one transaction,
    /// one event), and by `transactionId:revoked:<ms>` once revoked, so a refund learned by
    /// pull is news even when the transaction was already in the inbox.
    static func pulledTransaction(_ payload: JSON, catalog: Catalog, idPattern: UserIdPattern) throws(PayloadError) -> AppleDelivery {
        let t = try AppleTransactionInfo.decode(payload)
        let kind = t.revocationKind ?? t.periodKind
        let id = t.revocationDate.map { "\(t.transactionId):revoked:\($0.millisecondsSinceEpoch)" } ?? t.transactionId
        let event = makeEvent(
            provider: .appleTransaction, id: id, rawType: "TRANSACTION_HISTORY", kind: kind,
            at: t.revocationDate ?? t.purchaseDate ?? t.signedDate, transaction: t, catalog: catalog,
            environment: t.environment)
        return AppleDelivery(
            event: event, transaction: t, userCandidates: candidates(t, idPattern: idPattern),
            payload: ["source": "transaction_history", "transactionInfo": payload])
    }

    /// One `lastTransactions` item of Get All Subscription Statuses (its transaction and
    /// renewal info already verified): like a notification's data, the latest transaction
    /// and the renewal info as of the pull. Status 2 (expired) is an expiration, a revoked
    /// transaction a refund or revocation; otherwise the transaction states the period and
    /// expiry (as a notification of an unknown type does) and the renewal info the rest.
    /// Folds at its `signedDate` (the pull). `id` is chosen by the caller (`Reconciler`:
    /// content and predecessor, so the same state pulled twice is one event).
    static func pulledStatus(
        status: Int64?, transaction payload: JSON, renewal renewalPayload: JSON?, id: String,
        catalog: Catalog, idPattern: UserIdPattern
    ) throws(PayloadError) -> AppleDelivery {
        let t = try AppleTransactionInfo.decode(payload)
        let renewal = try renewalPayload.map { (p) throws(PayloadError) -> AppleRenewalInfo in try AppleRenewalInfo.decode(p) }
        let kind = t.revocationKind ?? (status == 2 ? .expiration : .unknown)
        let signed = [
            t.signedDate,
            try renewalPayload.map { (p) throws(PayloadError) in try PayloadReader(p, path: "renewalInfo").milliseconds("signedDate") } ?? nil,
        ]
        var event = makeEvent(
            provider: .appleTransaction, id: id, rawType: "SUBSCRIPTION_STATUS/\(status.map(String.init) ?? "none")",
            kind: kind, at: signed.compactMap { $0 }.max(), transaction: t, catalog: catalog,
            environment: t.environment)
        if let renewal { apply(renewal, to: &event, transaction: t, catalog: catalog) }
        var stored: JSONObject = ["source": "subscription_status", "status": status.map { JSON.int($0) } ?? .null, "transactionInfo": payload]
        if let renewalPayload { stored["renewalInfo"] = renewalPayload }
        return AppleDelivery(event: event, transaction: t, userCandidates: candidates(t, idPattern: idPattern), payload: .object(stored))
    }

    static func notificationKind(type: String, subtype: String?) -> EventKind {
        switch (type, subtype) {
        case ("SUBSCRIBED", _): return .purchase
        case ("DID_RENEW", _): return .renewal
        case ("DID_CHANGE_RENEWAL_STATUS", "AUTO_RENEW_DISABLED"?): return .cancellation
        case ("DID_CHANGE_RENEWAL_STATUS", _): return .uncancellation
        case ("DID_CHANGE_RENEWAL_PREF", "UPGRADE"?): return .renewal
        case ("DID_CHANGE_RENEWAL_PREF", _): return .productChange
        case ("DID_FAIL_TO_RENEW", _), ("GRACE_PERIOD_EXPIRED", _): return .billingIssue
        case ("EXPIRED", _): return .expiration
        case ("REFUND", _): return .refund
        case ("REVOKE", _): return .revoke
        case ("REFUND_REVERSED", _): return .refundReversed
        case ("RENEWAL_EXTENDED", _): return .extension
        case ("OFFER_REDEEMED", "INITIAL_BUY"?), ("OFFER_REDEEMED", "RESUBSCRIBE"?): return .purchase
        case ("OFFER_REDEEMED", "UPGRADE"?): return .renewal
        case ("OFFER_REDEEMED", "DOWNGRADE"?): return .productChange
        case ("OFFER_REDEEMED", _): return .extension
        case ("PRICE_INCREASE", _): return .priceIncrease
        case ("ONE_TIME_CHARGE", _): return .nonRenewingPurchase
        case ("CONSUMPTION_REQUEST", _): return .consumptionRequest
        case ("REFUND_DECLINED", _): return .refundDeclined
        case ("RENEWAL_EXTENSION", _): return .renewalExtension
        case ("EXTERNAL_PURCHASE_TOKEN", _): return .externalPurchaseToken
        case ("RESCIND_CONSENT", _): return .consentRescinded
        case ("METADATA_UPDATE", _): return .metadataUpdate
        case ("MIGRATION", _): return .migration
        case ("PRICE_CHANGE", _): return .priceChange
        case ("TEST", _): return .test
        default: return .unknown
        }
    }

    private static func makeEvent(
        provider: EventProvider, id: String, rawType: String, kind: EventKind, at: Timestamp?,
        transaction t: AppleTransactionInfo?, catalog: Catalog,
        environment: StoreEnvironment
    ) -> StoreEvent {
        StoreEvent(
            provider: provider, providerEventId: id, rawType: rawType, kind: kind, intrinsicAt: at,
            subscriptionId: t?.originalTransactionId, productId: t?.productId,
            tier: t.flatMap { catalog[$0.productId]?.tier },
            periodType: t?.periodType, isTrial: t?.isFreeTrial ?? false, environment: environment,
            platform: "app_store", purchasedAt: t?.purchaseDate, expiresAt: t.flatMap { expiry($0, catalog: catalog) },
            priceMilli: t?.priceMilli, currency: t?.currency, familyShared: t?.isFamilyShared ?? false)
    }

    /// When a transaction's access ends: min(expiresDate, revocationDate); for a product
    /// the catalog sells once (SPEC §15), what the catalog says — no end for `lifetime`, the
    /// catalog's `duration` after the purchase for `non_renewing` — cut short by a revocation.
    static func expiry(_ t: AppleTransactionInfo, catalog: Catalog) -> Timestamp? {
        guard let product = catalog[t.productId], let oneTime = product.oneTimeExpiry(purchasedAt: t.purchaseDate) else {
            return t.effectiveExpiry
        }
        switch (oneTime, t.revocationDate) {
        case let (end?, revoked?): return min(end, revoked)
        case let (end, revoked): return end ?? revoked
        }
    }

    private static func candidates(_ t: AppleTransactionInfo?, idPattern: UserIdPattern) -> [String] {
        guard let token = t?.appAccountToken, idPattern.matches(token) else { return [] }
        return [token]
    }
}
