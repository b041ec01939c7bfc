/// `POST /api/v1/billing/google/purchases` (Bearer ID token) `{"productId", "purchaseToken",
/// "restore": bool}`: the app posts what Play Billing gave it (SPEC §18), like the App Store
/// transaction post.
///
/// The server reads the token's state from the Play Developer API (503 `provider_unavailable`
/// while it cannot: the app retries; 422 `unknown_purchase_token` for a token Play does not
/// know), checks it is this app user's (403 `account_mismatch` when
/// `obfuscatedExternalAccountId` names another) and of the posted product (422
/// `product_mismatch`), decides its owner by `binding.policy` (`GooglePlayBinding`: 409
/// `purchase_bound_elsewhere` when another user owns the token, unless `restore_moves` and
/// `restore: true` move it to the caller), records it (`GooglePlayIngestion`), acknowledges it
/// at Google if it is not yet, and answers the caller's fresh access snapshot, the same fields
/// as `GET /billing/access`, plus `purchase {duplicate, state, type, binding}`. With the flag
/// `purchases.enabled` off, 403 `purchases_disabled` before anything is read; Google's pushes
/// are never cut (SPEC §14).
struct GooglePlayPurchaseRoute: Sendable {
    let ingestion: GooglePlayIngestion?
    let maxBodyBytes: Int
    let access: AccessRoute
    let catalog: ProductCatalog

    func handle(_ request: HTTPRequest, _ context: some UserRequestContext) throws -> HTTPResponse {
        guard let ingestion else {
            throw APIError.notConfigured("Google Play is not configured (google.packageName, google.serviceAccountFile)")
        }
        let userId = try context.authenticatedUser(request)
        let db = try context.requireDatabase()
        guard try BillingFlags.load(on: db).purchasesEnabled else {
            throw APIError(.forbidden, code: "purchases_disabled", message: "purchases are disabled (flag purchases.enabled)")
        }
        let body = try request.jsonBody(limits: JSONLimits(maxBytes: min(maxBodyBytes, 1 << 16), maxDepth: 4))
        let reader = try PayloadReader(body, path: "")
        let productId = try reader.requiredString("productId", maxLength: 191)
        let token = try reader.requiredString("purchaseToken", maxLength: 4096)
        let restore = try reader.bool("restore") ?? false
        guard !productId.isEmpty, !token.isEmpty else {
            throw APIError.badRequest("productId and purchaseToken must not be empty", code: "invalid_body")
        }

        // The catalog says whether the product is sold once (lifetime, non_renewing,
        // consumable: read from purchases.productsv2) or a subscription.
        let oneTime = ingestion.catalog[productId]?.oneTimeExpiry(purchasedAt: nil) != nil
        let read: GooglePlayRead
        do {
            read = try ingestion.read(token: token, kind: oneTime ? .product : .subscription)
        } catch  where error.isUnknownToken {
            throw APIError.unprocessable("Google Play knows no such purchase token", code: "unknown_purchase_token")
        } catch {
            context.logger.warning("Play Developer API not readable", ["google.error": .string(error.code)])
            throw APIError.unavailable("the Play Developer API could not be read, retry later", code: "provider_unavailable")
        }
        guard read.isOf(productId) else {
            throw APIError.unprocessable("the purchase token is not of this product", code: "product_mismatch")
        }
        if let named = read.obfuscatedAccountId, named != userId {
            throw APIError(.forbidden, code: "account_mismatch", message: "the purchase's obfuscatedExternalAccountId names another account")
        }
        let now = context.clock.now()
        try UserDirectory.ensureKnown(userId, source: .token, createdAt: now, now: now, on: db)
        let policy = ingestion.bindingPolicy
        let (decision, recorded) = try ErasedUsers.whileLive(userId, on: db) {
            () throws -> (GooglePlayBinding.Decision, GooglePlayIngestion.Recorded?) in
            let decision = try GooglePlayBinding.claim(token: token, userId: userId, restore: restore, policy: policy, now: now, on: db)
            if case .denied = decision { return (decision, nil) }
            let recorded = try ingestion.record(
                read, token: token, cause: "POSTED", providerEventId: nil, poster: userId, readAt: context.clock.now(), on: db)
            return (decision, recorded)
        }
        guard let recorded else {
            context.logger.info(
                "binding denied", ["binding.provider": "google", "binding.policy": .string(policy.rawValue), "binding.restore": .bool(restore)])
            throw APIError.conflict("this Google Play purchase belongs to another account", code: "purchase_bound_elsewhere")
        }
        if let owner = recorded.owner, owner != userId {
            // Bound by a concurrent post of another user between the check and the record.
            throw APIError.conflict("this Google Play purchase belongs to another account", code: "purchase_bound_elsewhere")
        }
        ingestion.acknowledgeIfNeeded(read, token: token, now: context.clock.now(), logger: context.logger, on: db)
        guard let snapshot = try access.loadWithQuota(userId: userId, now: context.clock.now(), cadence: catalog.cadence(of:), on: db) else {
            throw APIError.unavailable()
        }
        var json = snapshot.json
        if case .object(var object) = json {
            object["purchase"] = [
                "duplicate": .bool(recorded.ingestion.duplicate), "state": .string(read.state), "type": .string(read.kind.rawValue),
                "binding": .string(decision.label),
            ]
            json = .object(object)
        }
        var response = HTTPResponse.json(.ok, json)
        response.headers["Cache-Control"] = "no-store"
        return response
    }
}
