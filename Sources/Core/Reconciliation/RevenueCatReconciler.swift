/// One pull of one RevenueCat subscriber (SPEC §15): ask RevenueCat's REST API
/// (`RevenueCatAPI`), decode its CustomerInfo (`RevenueCatSubscriber`) and record what it
/// says in the inbox as `revenuecat_pull` events folded by the same fold — all in one
/// transaction, with keys that make the same state pulled twice one event. Like the App
/// Store's `Reconciler`: the network part (`fetch`) runs outside any transaction, the
/// database part (`record`) never calls the network.
struct RevenueCatReconciler: Sendable {
    let api: RevenueCatAPI
    let tiers: TierResolver
    let catalog: [String: BillingConfiguration.Product]

    /// What a recorded pull changed: the user's RevenueCat subscriptions before and after.
    struct Outcome: Sendable {
        var userId: String
        var eventsAdded: Int
        var before: [SubscriptionState]
        var after: [SubscriptionState]

        var changed: Bool { before.map(Reconciler.essence) != after.map(Reconciler.essence) }

        var json: JSON {
            [
                "provider": "revenuecat", "userId": .string(userId), "outcome": .string(changed ? "corrected" : "unchanged"),
                "changed": .bool(changed), "eventsAdded": .int(Int64(eventsAdded)),
                "before": .array(before.map(\.reconcileJSON)), "after": .array(after.map(\.reconcileJSON)),
            ]
        }
    }

    // MARK: the network part

    /// The subscriber's state as RevenueCat answers it now; an answer that is not
    /// CustomerInfo's shape is a `.malformedResponse` (nothing is recorded).
    func fetch(userId: String) throws(ProviderAPIError) -> RevenueCatSubscriber {
        let info = try api.subscriber(appUserId: userId)
        do {
            return try RevenueCatSubscriber.decode(info, appUserId: userId, tiers: tiers, catalog: catalog)
        } catch {
            throw ProviderAPIError(.malformedResponse, status: 200, detail: error.field)
        }
    }

    // MARK: the database part

    /// Records `subscriber` inside the caller's open transaction (read committed): every new
    /// event through the common ingestion with the user as its only candidate. The caller
    /// commits; the ingestion's claims run after (`afterCommit`).
    func record(
        _ subscriber: RevenueCatSubscriber, userId: String, now: Timestamp,
        on db: DatabaseConnection
    ) throws -> Outcome {
        let before = try Self.subscriptions(userId: userId, on: db)
        var added = 0
        for var pulled in subscriber.pulled {
            if pulled.event.kind != .nonRenewingPurchase,
                let webhookKey = try Self.webhookSubscription(
                    userId: userId, productId: pulled.event.productId,
                    store: pulled.event.platform, on: db)
            {
                // The subscription RevenueCat's webhooks named (the fold matches it too, over
                // the whole inbox; this is what the row's subscription_id says for statistics).
                pulled.event.subscriptionId = webhookKey
            }
            if let digest = pulled.stateDigest {
                guard let id = try Self.stateEventId(digest: digest, userId: userId, event: pulled.event, on: db) else { continue }
                pulled.event.providerEventId = id
            }
            let recorded = try EventIngestion.record(
                EventIngestion.Delivery(event: pulled.event, payload: .value(pulled.payload), candidates: [userId]), now: now, on: db)
            if !recorded.duplicate { added += 1 }
        }
        let after = try Self.subscriptions(userId: userId, on: db)
        return Outcome(userId: userId, eventsAdded: added, before: before, after: after)
    }

    /// The inbox key of a pulled subscriber state: `rcpull:<user>:state:<digest>:<predecessor>`,
    /// where the predecessor is the user's newest RevenueCat event (webhook or pull) of the same
    /// product and store up to the pull's request date. nil — nothing to record — when that
    /// newest event is this very statement pulled before: the same state pulled twice is one
    /// event (a webhook stating a later time in between does not make it news), while a state
    /// that comes back after another (a renewal after a billing issue, auto-renew off then on
    /// again) is news.
    static func stateEventId(digest: String, userId: String, event: StoreEvent, on db: DatabaseConnection) throws(DatabaseError) -> String? {
        let userKey = SHA256.hexHash(Array(userId.utf8)).prefix(16)
        let prefix = "rcpull:\(userKey):state:\(digest):"
        let newest = try db.queryOne(
            """
            SELECT e.id, e.provider_event_id FROM billing_events e
            WHERE e.id IN (SELECT p.event_id FROM billing_event_parties p WHERE p.user_id = \(userId)
                           UNION SELECT c.event_id FROM billing_event_user_candidates c WHERE c.candidate_id = \(userId))
              AND e.provider IN (\(EventProvider.revenuecat.rawValue), \(EventProvider.revenuecatPull.rawValue))
              AND e.product_id = \(event.productId) AND e.store <=> \(event.platform) AND e.intrinsic_at <= \(event.intrinsicAt)
            ORDER BY e.intrinsic_at DESC, e.id DESC LIMIT 1
            """)
        if let newest, try newest.string("provider_event_id").hasPrefix(prefix) { return nil }
        return prefix + String(try newest?.uint64("id") ?? 0)
    }

    /// The subscription id of the user's latest RevenueCat webhook for this product and store.
    static func webhookSubscription(
        userId: String, productId: String?, store: String?,
        on db: DatabaseConnection
    ) throws(DatabaseError) -> String? {
        guard let productId else { return nil }
        return try db.queryOne(
            """
            SELECT e.subscription_id FROM billing_event_parties p JOIN billing_events e ON e.id = p.event_id
            WHERE p.user_id = \(userId) AND e.provider = \(EventProvider.revenuecat.rawValue) AND e.status = 'applied'
              AND e.product_id = \(productId) AND e.store <=> \(store) AND e.subscription_id IS NOT NULL AND e.subscription_id <> ''
            ORDER BY e.intrinsic_at DESC, e.id DESC LIMIT 1
            """)?.optionalString("subscription_id")
    }

    /// The user's subscriptions RevenueCat speaks for, as folded.
    static func subscriptions(userId: String, on db: DatabaseConnection) throws(DatabaseError) -> [SubscriptionState] {
        try db.query(
            """
            SELECT \(unsafeRaw: SubscriptionState.columns) FROM billing_subscriptions s
            WHERE s.user_id = \(userId)
              AND s.provider IN (\(EventProvider.revenuecat.rawValue), \(EventProvider.revenuecatPull.rawValue))
            """
        ).map { (row) throws(DatabaseError) in try SubscriptionState(row: row) }.sorted(by: SubscriptionState.projectionOrder)
    }
}
