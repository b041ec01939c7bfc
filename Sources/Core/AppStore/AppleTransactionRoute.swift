/// `POST /api/v1/billing/apple/transactions` (Bearer ID token) `{"signedTransaction": ...,
/// "restore": bool}`: the app posts what StoreKit 2 gave it (SPEC §5, seeds/004).
///
/// Verify (422 with the reason; not quarantined: the app still holds the transaction and
/// StoreKit replays it), check `appAccountToken` names the caller (403 otherwise), bind the
/// subscription (`AppleBinding.bind`: same user → idempotent; another owner → 409 under
/// `deny`, or a move under `restore_moves` with `restore: true`), record the transaction in
/// the inbox (keyed by `transactionId`) and answer the caller's fresh access snapshot, the
/// same fields as `GET /billing/access`, plus `transaction {duplicate, binding}`.
/// With the flag `purchases.enabled` off, 403 `purchases_disabled` before anything is read
/// (read from the database, not the flag cache: the switch holds from the moment it is set);
/// the App Store's notifications are never cut (SPEC §14).
struct AppleTransactionRoute: Sendable {
    let appStore: AppStoreRouteSettings
    let maxBodyBytes: Int
    /// It answers a snapshot as the access route does, through the same reader.
    let access: AccessRoute

    func handle(_ request: HTTPRequest, _ context: some UserRequestContext) throws -> HTTPResponse {
        guard let verifier = appStore.verifier else {
            throw APIError.notConfigured("App Store transactions are not configured (apple.trustedRootsFiles, apple.bundleId)")
        }
        let userId = try context.authenticatedUser(request)
        let db = try context.requireDatabase()
        guard try BillingFlags.load(on: db).purchasesEnabled else {
            throw APIError(.forbidden, code: "purchases_disabled", message: "purchases are disabled (flag purchases.enabled)")
        }
        let now = context.clock.now()
        let policy = appStore.bindingPolicy

        let body = try request.jsonBody(limits: JSONLimits(maxBytes: maxBodyBytes, maxDepth: 8))
        let jws = try AppleSignedDataVerifier.signedData(body, field: "signedTransaction")
        let restore = try PayloadReader(body, path: "").bool("restore") ?? false

        let delivery: AppleDelivery
        do {
            delivery = try AppleDelivery.postedTransaction(
                jws, verifier: verifier, catalog: appStore.catalog.products,
                idPattern: appStore.idPattern, now: now)
        } catch let error as AppleVerificationError {
            context.logger.warning("transaction refused", ["apple.reason": .string(error.reason.rawValue)])
            throw APIError.unprocessable("the signed transaction was refused: \(error.reason.rawValue)", code: error.reason.rawValue)
        }
        guard let transaction = delivery.transaction else { throw APIError.unprocessable("no transaction", code: "malformed_jws") }
        if let token = transaction.appAccountToken, token != userId.lowercased() {
            throw APIError(
                .forbidden, code: "app_account_token_mismatch",
                message: "the transaction's appAccountToken names another account")
        }

        try UserDirectory.ensureKnown(userId, source: .token, createdAt: now, now: now, on: db)
        let decision = try ErasedUsers.whileLive(userId, on: db) {
            try AppleBinding.bind(
                subscriptionId: transaction.originalTransactionId, userId: userId, restore: restore,
                policy: policy, transactionId: transaction.transactionId,
                environment: transaction.environment, now: now, on: db)
        }
        if case .denied = decision {
            context.logger.info("binding denied", ["binding.policy": .string(policy.rawValue), "binding.restore": .bool(restore)])
            throw APIError.conflict("this App Store subscription belongs to another account", code: "subscription_bound_elsewhere")
        }
        let outcome = try AppleIngestion.ingest(delivery, policy: policy, now: now, on: db)
        // The same snapshot as GET /billing/access (plan, capabilities, balances, enforcement).
        guard
            let snapshot = try access.loadWithQuota(
                userId: userId, now: now, cadence: appStore.catalog.cadence(of:), on: db)
        else {
            throw APIError.unavailable()
        }
        var json = snapshot.json
        if case .object(var object) = json {
            object["transaction"] = ["duplicate": .bool(outcome.duplicate), "binding": .string(decision.label)]
            json = .object(object)
        }
        var response = HTTPResponse.json(.ok, json)
        response.headers["Cache-Control"] = "no-store"
        return response
    }
}

extension AppleBinding.Decision {
    var label: String {
        switch self {
        case .bound: return "bound"
        case .alreadyOwned: return "already_owned"
        case .moved: return "moved"
        case .denied: return "denied"
        }
    }
}
