/// One pull of one App Store subscription (SPEC §11): ask Apple (`AppStoreServerAPI`), verify
/// everything it signed with the notifications' verifier, and record what it says in the
/// inbox as events folded by the same fold — all in one transaction, so a failed or partial
/// pull changes nothing, and with keys that make the same state pulled twice one event.
///
/// The network part (`fetch`) runs outside any database transaction; the database part
/// (`record`) never calls the network, so its deadlock retries are safe.
struct Reconciler: Sendable {
    let api: AppStoreServerAPI
    let verifier: AppleSignedDataVerifier
    let catalog: AppleDelivery.Catalog
    let idPattern: UserIdPattern
    let policy: BillingConfiguration.Binding.Policy
    /// History pages read per pull at most (Apple pages 20 transactions).
    var maxHistoryPages = 50

    /// What Apple said, verified: the subscription's latest status and its history.
    struct Pull: Sendable {
        var environment: StoreEnvironment
        /// `lastTransactions` items of this subscription: status, verified transaction and renewal info.
        var statuses: [(status: Int64?, transaction: JSON, renewal: JSON?)]
        /// Verified transactions of this subscription, oldest first.
        var history: [JSON]
    }

    /// What a recorded pull changed.
    struct Outcome: Sendable {
        var subscriptionId: String
        var userId: String?
        var environment: StoreEnvironment
        var eventsAdded: Int
        var before: SubscriptionState?
        var after: SubscriptionState?

        /// Whether the projection of the subscription changed (its bookkeeping fields aside).
        var changed: Bool { Reconciler.essence(before) != Reconciler.essence(after) }
    }

    // MARK: the network part

    /// Production first, then Sandbox when Production answers "transaction id not found"
    /// (Apple's recommended order). Environments outside `apple.environments` are not asked.
    func fetch(subscriptionId: String, now: Timestamp) throws(ProviderAPIError) -> Pull {
        let order = AppStoreServerAPI.Environment.allCases.filter { verifier.environments.contains($0.rawValue) }
        var lastError = ProviderAPIError(.status, status: 404, errorCode: 4_040_010, detail: "no accepted environment")
        for environment in order {
            let statuses: JSON
            do {
                statuses = try api.allSubscriptionStatuses(transactionId: subscriptionId, environment: environment)
            } catch  where error.isTransactionNotFound {
                lastError = error
                continue
            }
            var pull = Pull(environment: environment == .production ? .production : .sandbox, statuses: [], history: [])
            for group in statuses["data"]?.arrayValue ?? [] {
                for item in group["lastTransactions"]?.arrayValue ?? [] where item["originalTransactionId"]?.stringValue == subscriptionId {
                    guard let jws = item["signedTransactionInfo"]?.stringValue else {
                        throw ProviderAPIError(.malformedResponse, status: 200, detail: "status without signedTransactionInfo")
                    }
                    let transaction = try verified { () throws(AppleVerificationError) in try verifier.verifyTransaction(jws, now: now) }
                    let renewal = try item["signedRenewalInfo"]?.stringValue.map { (jws) throws(ProviderAPIError) in
                        try verified { () throws(AppleVerificationError) in try verifier.verifyRenewalInfo(jws, now: now) }
                    }
                    // The signed data must name the subscription asked about, not only the envelope.
                    guard transaction["originalTransactionId"]?.stringValue == subscriptionId,
                        renewal.map({ $0["originalTransactionId"]?.stringValue == subscriptionId }) ?? true
                    else {
                        throw ProviderAPIError(.malformedResponse, status: 200, detail: "signed data of another subscription")
                    }
                    pull.statuses.append((item["status"]?.int64Value, transaction, renewal))
                }
            }
            guard !pull.statuses.isEmpty else {
                throw ProviderAPIError(.malformedResponse, status: 200, detail: "the subscription is not in the statuses")
            }
            var revision: String?
            for page in 1...maxHistoryPages {
                let answer = try api.transactionHistory(transactionId: subscriptionId, revision: revision, environment: environment)
                guard let signed = answer["signedTransactions"]?.arrayValue else {
                    throw ProviderAPIError(.malformedResponse, status: 200, detail: "history without signedTransactions")
                }
                for item in signed {
                    guard let jws = item.stringValue else { throw ProviderAPIError(.malformedResponse, status: 200, detail: "history item") }
                    let transaction = try verified { () throws(AppleVerificationError) in try verifier.verifyTransaction(jws, now: now) }
                    if transaction["originalTransactionId"]?.stringValue == subscriptionId { pull.history.append(transaction) }
                }
                guard answer["hasMore"]?.boolValue == true else { break }
                guard let next = answer["revision"]?.stringValue, next != revision, page < maxHistoryPages else {
                    throw ProviderAPIError(.malformedResponse, status: 200, detail: "history pages do not end")
                }
                revision = next
            }
            return pull
        }
        throw lastError
    }

    private func verified(_ body: () throws(AppleVerificationError) -> JSON) throws(ProviderAPIError) -> JSON {
        do { return try body() } catch { throw ProviderAPIError(.verification, detail: error.reason.rawValue) }
    }

    // MARK: the database part

    /// Records `pull` inside the caller's open transaction (read committed): every new event
    /// through the App Store ingestion (binding, inbox, fold), the owner's subscription read
    /// before and after. The ingestion's claims run after the caller's commit (`afterCommit`).
    func record(
        _ pull: Pull, subscriptionId: String, now: Timestamp,
        on db: DatabaseConnection
    ) throws -> Outcome {
        let owner = try AppleBinding.owner(of: subscriptionId, on: db)
        let before = try owner.map { (user) throws(DatabaseError) in try Self.state(userId: user, subscriptionId: subscriptionId, on: db) } ?? nil
        var added = 0
        // History: transactions of the current period or later (the renewals a lost
        // notification did not bring), and refunds or revocations of any period. Older plain
        // periods tell the fold nothing it could use.
        for payload in pull.history {
            let delivery = try AppleDelivery.pulledTransaction(payload, catalog: catalog, idPattern: idPattern)
            guard let t = delivery.transaction else { continue }
            if t.revocationDate == nil, let current = before?.purchasedAt, let started = t.purchaseDate, started < current { continue }
            if try !AppleIngestion.record(delivery, policy: policy, now: now, on: db).duplicate { added += 1 }
        }
        for status in pull.statuses {
            var delivery = try AppleDelivery.pulledStatus(
                status: status.status, transaction: status.transaction, renewal: status.renewal,
                id: "", catalog: catalog, idPattern: idPattern)
            guard let id = try Self.statusEventId(delivery.event, subscriptionId: subscriptionId, on: db) else { continue }
            delivery.event.providerEventId = id
            if try !AppleIngestion.record(delivery, policy: policy, now: now, on: db).duplicate { added += 1 }
        }
        let after = try owner.map { (user) throws(DatabaseError) in try Self.state(userId: user, subscriptionId: subscriptionId, on: db) } ?? nil
        return Outcome(
            subscriptionId: subscriptionId, userId: owner, environment: pull.environment, eventsAdded: added,
            before: before, after: after)
    }

    /// The inbox key of a pulled status: `status:<subscription>:<digest of what it states>:<predecessor>`,
    /// where the predecessor is the newest event of the subscription carrying renewal info
    /// (a notification's) or stating a pulled status. nil — nothing to record — when that newest
    /// event is this very statement pulled before: the same state pulled twice is one event,
    /// while a state that comes back after another (auto-renew off, then on again) is news.
    static func statusEventId(_ event: StoreEvent, subscriptionId: String, on db: DatabaseConnection) throws(DatabaseError) -> String? {
        let prefix = "status:\(subscriptionId):\(digest(event)):"
        let newest = try db.queryOne(
            """
            SELECT id, provider_event_id FROM billing_events
            WHERE subscription_id = \(subscriptionId) AND provider IN (\(list: AppleBinding.appleProviders))
              AND (in_billing_retry IS NOT NULL OR event_type LIKE 'SUBSCRIPTION_STATUS/%')
            ORDER BY intrinsic_at DESC, id DESC LIMIT 1
            """)
        if let newest, try newest.string("provider_event_id").hasPrefix(prefix) { return nil }
        return prefix + String(try newest?.uint64("id") ?? 0)
    }

    /// A short digest of what a pulled status states (not when Apple signed it).
    static func digest(_ event: StoreEvent) -> String {
        let fields: [String?] = [
            event.kind.rawValue, event.productId, event.environment.rawValue,
            event.purchasedAt.map { String($0.millisecondsSinceEpoch) },
            event.expiresAt.map { String($0.millisecondsSinceEpoch) },
            event.willRenew.map { $0 ? "1" : "0" }, event.inBillingRetry.map { $0 ? "1" : "0" },
            event.graceExpiresAt.map { String($0.millisecondsSinceEpoch) }, event.newProductId,
            event.expirationIntent.map(String.init),
        ]
        let text = fields.map { $0 ?? "-" }.joined(separator: "|")
        return String(SHA256.hexHash(Array(text.utf8)).prefix(16))
    }

    static func state(userId: String, subscriptionId: String, on db: DatabaseConnection) throws(DatabaseError) -> SubscriptionState? {
        try db.queryOne(
            """
            SELECT \(unsafeRaw: SubscriptionState.columns) FROM billing_subscriptions s
            WHERE s.user_id = \(userId) AND s.subscription_id = \(subscriptionId)
            """
        ).map { (row) throws(DatabaseError) in try SubscriptionState(row: row) }
    }

    /// A subscription without its bookkeeping (which event spoke last, and when).
    static func essence(_ state: SubscriptionState?) -> SubscriptionState? {
        guard var state else { return nil }
        state.lastEventAt = Timestamp(millisecondsSinceEpoch: 0)
        state.provider = .appleTransaction
        return state
    }
}

extension SubscriptionState {
    /// What `subscriptions.reconcile` reports of a subscription before and after a pull.
    var reconcileJSON: JSON {
        [
            "productId": JSON(productId), "tier": JSON(tier?.rawValue), "phase": .string(phase.rawValue), "willRenew": .bool(willRenew),
            "environment": .string(environment.rawValue), "expiresAt": JSON(expiresAt?.iso8601),
            "graceExpiresAt": JSON(graceExpiresAt?.iso8601), "pendingProductId": JSON(pendingChange?.productId),
        ]
    }
}
