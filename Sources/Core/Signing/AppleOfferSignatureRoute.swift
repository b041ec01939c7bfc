/// `POST /api/v1/billing/apple/offer-signatures` (Bearer ID token, SPEC §17): the signature
/// StoreKit needs to redeem an App Store offer on the direct path, made only for what this
/// user's paywall shows him now, so the ladder (§14) is a rule a modified app cannot skip.
///
/// - `{productId, offerId}`: the promotional offer, signed only when some placement of the
///   published offerings shows him that product with that `promotionalOffer` now (a ladder
///   at his stored stage, or a fixed offering) and `purchases.enabled` is on. `placement`
///   narrows the search to one placement. `signatureVersion: 1` answers the original API's
///   signature (`applicationUsername` optional) instead of the JWS.
/// - `{productId, introductoryOffer: true}`: introductory-offer eligibility, signed with
///   `allowIntroductoryOffer` = `trialEligible` (§14) for a product some offering sells.
///
/// `transactionId` is the user's latest App Store transaction known here (either provider);
/// without one, the app's `appTransactionId` (StoreKit's `AppTransaction`) when it sends it.
/// Anything not eligible is 403 `offer_not_eligible` (counted). A promotional offer signed is
/// recorded in the paywall funnel (`offer_signed`, its placement and stage; `environment`, as
/// the app's paywall events say it) before it is answered.
struct AppleOfferSignatureRoute: Sendable {
    let signer: AppleOfferSigner?
    let offerings: OfferingCatalog
    let metrics: BillingMetrics

    private struct Request {
        var productId: String
        /// nil: introductory-offer eligibility.
        var offerId: String?
        var placement: String?
        var version: Int
        var applicationUsername: String
        var appTransactionId: String?
        var environment: StoreEnvironment
    }

    func handle(_ request: HTTPRequest, _ context: some UserRequestContext) throws -> HTTPResponse {
        let userId = try context.authenticatedUser(request)
        let asked = try Self.parse(request)
        guard let signer else {
            throw APIError.notConfigured("App Store offer signatures are not configured (apple.inAppKey and apple.bundleId)")
        }
        let kind: BillingMetrics.OfferSignatureKind = asked.offerId == nil ? .introductory : .promotional
        let db = try context.requireDatabase()
        let now = context.clock.now()
        let published = OfferingCatalog.version(in: try offerings.versions(on: db), at: now)
        let contract = published.contract
        if let placement = asked.placement, contract.placements[placement] == nil {
            throw APIError(.notFound, code: "unknown_placement", message: "no placement \"\(placement)\" in offerings version \(published.version)")
        }
        let decision = try db.transaction(retries: 3) { db -> Decision in
            try ErasedUsers.holdLive(userId, on: db)  // 410 user_deleted (SPEC §19)
            guard try BillingFlags.load(on: db).purchasesEnabled else {
                return .refused("purchases are disabled (flag purchases.enabled)")
            }
            guard contract.offerings.values.contains(where: { $0.products.contains { $0.productId == asked.productId } }) else {
                return .refused("no offering of offerings version \(published.version) sells \(asked.productId)")
            }
            let transactionId = try Self.latestTransactionId(userId: userId, on: db) ?? asked.appTransactionId
            guard let offerId = asked.offerId else {
                guard let transactionId else { return .needsTransaction }
                let history = try OfferingLadder.introHistory(userId: userId, on: db)
                let allow = OfferingLadder.trialEligible(contract, productId: asked.productId, introHistory: history)
                return .introductory(allow: allow, transactionId: transactionId)
            }
            guard let shown = try Self.showing(asked, offerId: offerId, contract: contract, userId: userId, on: db) else {
                return .refused("\(asked.productId) with offer \(offerId) is not what this user's paywall shows now")
            }
            return .promotional(placement: shown.placement, offering: shown.offering, stage: shown.stage, transactionId: transactionId)
        }
        switch decision {
        case .refused(let reason):
            metrics.offerSignature(kind, .refused)
            context.outcome = "offer_not_eligible"
            throw APIError(.forbidden, code: "offer_not_eligible", message: reason)
        case .needsTransaction:
            throw APIError.badRequest(
                "no App Store transaction of this user is known: send appTransactionId (StoreKit's AppTransaction.appTransactionID)",
                code: "transaction_required")
        case .introductory(let allow, let transactionId):
            let signature = try signer.introductoryOfferEligibility(
                productId: asked.productId, allow: allow, transactionId: transactionId, now: now)
            metrics.offerSignature(kind, .signed)
            context.outcome = "signed"
            return .json(
                .ok,
                [
                    "signature": .string(signature), "productId": .string(asked.productId), "introductoryOffer": true,
                    "allowIntroductoryOffer": .bool(allow),
                ])
        case .promotional(let placement, let offering, let stage, let transactionId):
            var answer: JSONObject = [
                "productId": .string(asked.productId), "offerId": JSON(asked.offerId), "placement": .string(placement),
                "stage": stage.map { .int(Int64($0)) } ?? .null, "signatureVersion": .int(Int64(asked.version)),
            ]
            if asked.version == 1 {
                let legacy = try signer.legacyPromotionalOffer(
                    productId: asked.productId, offerIdentifier: asked.offerId ?? "", applicationUsername: asked.applicationUsername,
                    now: now)
                answer["signature"] = .string(legacy.signature)
                answer["keyIdentifier"] = .string(signer.keyId)
                answer["nonce"] = .string(legacy.nonce)
                answer["timestamp"] = .int(legacy.timestamp)
            } else {
                answer["signature"] = .string(
                    try signer.promotionalOffer(
                        productId: asked.productId, offerIdentifier: asked.offerId ?? "", transactionId: transactionId, now: now))
            }
            // In the funnel before it is answered: a signature the app holds is one it counts.
            try PaywallEvents.insertSignedOffer(
                userId: userId, eventId: "offer-signature:" + (try AppleOfferSigner.nonce()), placement: placement,
                offering: offering, stage: stage, offeringVersion: published.version, productId: asked.productId,
                offerId: asked.offerId ?? "", environment: asked.environment, now: now, on: db)
            metrics.offerSignature(kind, .signed)
            context.outcome = "signed"
            context.logger.info(
                "offer signed",
                ["offer.placement": .string(placement), "offer.stage": stage.map { .int(Int64($0)) } ?? .null])
            return .json(.ok, .object(answer))
        }
    }

    private enum Decision {
        case refused(String)
        case needsTransaction
        case introductory(allow: Bool, transactionId: String)
        case promotional(placement: String, offering: String, stage: Int?, transactionId: String?)
    }

    private static func parse(_ request: HTTPRequest) throws -> Request {
        let body = try request.jsonBody(limits: JSONLimits(maxBytes: 16_384, maxDepth: 8))
        let reader = try PayloadReader(body, path: "")
        let productId = try reader.requiredString("productId", maxLength: 191)
        let offerId = try reader.string("offerId", maxLength: 191)
        let introductory = try reader.bool("introductoryOffer") ?? false
        guard (offerId != nil) != introductory else {
            throw PayloadError("offerId", "give offerId (a promotional offer) or introductoryOffer: true, not both")
        }
        let placement = try reader.string("placement", maxLength: 64)
        if let placement, !OfferingContract.isId(placement) {
            throw PayloadError("placement", "1 to 64 characters among letters, digits and . _ : -")
        }
        var version = 2
        if let value = reader.value("signatureVersion"), !value.isNull {
            guard let number = value.int64Value, number == 1 || number == 2 else { throw PayloadError("signatureVersion", "expected 1 or 2") }
            guard offerId != nil || number == 2 else {
                throw PayloadError("signatureVersion", "introductory-offer eligibility has version 2 only")
            }
            version = Int(number)
        }
        let username = try reader.string("applicationUsername", maxLength: 191) ?? ""
        let appTransactionId = try reader.string("appTransactionId", maxLength: 64)
        if let appTransactionId, appTransactionId.isEmpty || !appTransactionId.utf8.allSatisfy({ (0x30...0x39).contains($0) }) {
            throw PayloadError("appTransactionId", "expected the digits of StoreKit's AppTransaction.appTransactionID")
        }
        var environment = StoreEnvironment.production
        if let text = try reader.string("environment", maxLength: 16) {
            guard let parsed = StoreEnvironment(rawValue: text) else { throw PayloadError("environment", "production or sandbox") }
            environment = parsed
        }
        return Request(
            productId: productId, offerId: offerId, placement: placement, version: version, applicationUsername: username,
            appTransactionId: appTransactionId, environment: environment)
    }

    /// The placement (first by id) showing `productId` with promotional offer `offerId` to
    /// the user now, and its ladder stage; nil when none does.
    private static func showing(
        _ asked: Request, offerId: String, contract: OfferingContract, userId: String, on db: DatabaseConnection
    ) throws(DatabaseError) -> (placement: String, offering: String, stage: Int?)? {
        var stages: [String: Int] = [:]
        for id in contract.placements.keys.sorted() where asked.placement == nil || asked.placement == id {
            var stored = 0
            if case .ladder(let ladder)? = contract.placements[id]?.shows {
                if let known = stages[ladder] {
                    stored = known
                } else {
                    stored = try OfferingLadder.storedStage(userId: userId, ladder: ladder, on: db)
                    stages[ladder] = stored
                }
            }
            guard let decision = OfferingLadder.decide(contract, placement: id, storedStage: stored),
                let offering = contract.offerings[decision.offering]
            else { continue }
            if offering.products.contains(where: { $0.productId == asked.productId && $0.promotionalOffer == offerId }) {
                return (id, decision.offering, decision.stage)
            }
        }
        return nil
    }

    /// The user's latest App Store transaction id known here: from the App Store directly
    /// (the event's transaction, else its subscription's original transaction: both are
    /// his), or from RevenueCat for an App Store purchase.
    static func latestTransactionId(userId: String, on db: DatabaseConnection) throws(DatabaseError) -> String? {
        try db.queryOne(
            """
            SELECT COALESCE(transaction_id, subscription_id) AS transaction_id FROM billing_events
            WHERE user_id = \(userId) AND (transaction_id IS NOT NULL OR subscription_id IS NOT NULL)
              AND (provider IN ('apple_notification', 'apple_transaction') OR (provider = 'revenuecat' AND store = 'app_store'))
            ORDER BY intrinsic_at DESC, id DESC LIMIT 1
            """)?.string("transaction_id")
    }
}
