/// Google Play purchases into the shared inbox and fold (SPEC §18). Like the App Store's and
/// RevenueCat's pulls, the network part (`read`, `acknowledge`) runs outside any transaction
/// and the database part (`record`) never calls the network.
///
/// `billing_google_purchases` is the token's binding and memory: one row per purchase token
/// (its subscription id `gp:` + SHA-256), locked first in every transaction that records for
/// it (then the users' access rows, in id order, as everywhere). Its owner is, in order: the
/// owner already bound; `obfuscatedExternalAccountId` (the app sets it to the user id); the
/// app user who posted the token; the owner of the token it replaces (`linkedPurchaseToken`).
/// An owner not yet known leaves the event waiting for him (unmatched, claimed when he
/// appears), and the row unbound until a later read finds him known.
struct GooglePlayIngestion: Sendable {
    let api: GooglePlayAPI
    let tiers: TierResolver
    let idPattern: UserIdPattern
    let metrics: BillingMetrics
    /// The `products` catalog: how long a one-time product grants its tier.
    var catalog: [String: BillingConfiguration.Product] = [:]
    /// `binding.policy`, recorded with each binding decision.
    var bindingPolicy: BillingConfiguration.Binding.Policy = .deny

    static let providers: [SQLValue] = [.string(EventProvider.googlePlay.rawValue)]

    /// What recording a read state did.
    struct Recorded: Sendable {
        var ingestion: EventIngestion.Outcome
        /// The token's owner after the record (nil: none known yet).
        var owner: String?
    }

    // MARK: the network part

    /// The token's state as the Play Developer API answers it now.
    func read(token: String, kind: GooglePlayRead.Kind = .subscription) throws(ProviderAPIError) -> GooglePlayRead {
        try api.read(token: token, kind: kind)
    }

    /// Acknowledges the purchase at Google unless it is already, once across every process
    /// (the row's claim), after its state was committed. A failure is counted and logged,
    /// and left for the next read or the operator (`google.purchases.acknowledge`): the
    /// delivery that read the state is already committed and answered.
    func acknowledgeIfNeeded(_ read: GooglePlayRead, token: String, now: Timestamp, logger: Logger, on db: DatabaseConnection) {
        guard !read.acknowledged, read.isAcknowledgeable, let product = read.productId else { return }
        let id = GooglePlayEvent.subscriptionId(token: token)
        do {
            let claimed = try db.transaction(retries: 3) { db in
                try db.execute(
                    """
                    UPDATE billing_google_purchases SET ack_claimed_at = \(now), ack_attempts = ack_attempts + 1
                    WHERE subscription_id = \(id) AND acknowledged_at IS NULL
                      AND (ack_claimed_at IS NULL OR ack_claimed_at < \(now.adding(milliseconds: -60_000)))
                    """
                ).affectedRows == 1
            }
            guard claimed else { return }
            do {
                switch read.kind {
                case .subscription: try api.acknowledge(subscriptionId: product, token: token)
                case .product: try api.acknowledgeProduct(productId: product, token: token)
                }
            } catch {
                metrics.googleAcknowledgeFailures.add()
                logger.warning("Play purchase not acknowledged; retried later", ["google.error": .string(error.code)])
                _ = try db.transaction(retries: 3) { db in
                    try db.execute(
                        """
                        UPDATE billing_google_purchases SET ack_claimed_at = NULL, ack_error = \(String(error.code.prefix(64)))
                        WHERE subscription_id = \(id)
                        """)
                }
                return
            }
            metrics.googleAcknowledged.add()
            _ = try db.transaction(retries: 3) { db in
                try db.execute(
                    """
                    UPDATE billing_google_purchases SET acknowledged_at = \(now), ack_claimed_at = NULL, ack_error = NULL
                    WHERE subscription_id = \(id)
                    """)
            }
        } catch {
            logger.warning("Play acknowledgement not recorded", ["error.message": .string(String(describing: error))])
        }
    }

    // MARK: the database part

    /// Records a state read at `readAt` in its own transaction: the token's row, then the
    /// state through the common ingestion. `providerEventId` is the push's key
    /// (`gpush:<messageId>`); nil for a read of the app's post or a pull, keyed by what it
    /// states (`pullEventId`: the same state read twice is one event).
    func record(
        _ read: GooglePlayRead, token: String, cause: String, providerEventId: String?,
        poster: String?, readAt: Timestamp, payload: JSONObject = [:], on db: DatabaseConnection
    ) throws -> Recorded {
        try db.transaction(retries: 3, isolation: .readCommitted) { db -> Recorded in
            try recordInTransaction(
                read, token: token, cause: cause, providerEventId: providerEventId, poster: poster, readAt: readAt,
                payload: payload, on: db)
        }
    }

    /// `record` inside the caller's open transaction (read committed): a pull of the sweeper
    /// or of `subscriptions.reconcile`, committed with its schedule and audit rows.
    func recordInTransaction(
        _ read: GooglePlayRead, token: String, cause: String, providerEventId: String?,
        poster: String?, readAt: Timestamp, payload: JSONObject = [:], on db: DatabaseConnection
    ) throws(DatabaseError) -> Recorded {
        var event = read.event(
            token: token, cause: cause, providerEventId: providerEventId ?? "", readAt: readAt, tiers: tiers, catalog: catalog)
        let claimed = read.obfuscatedAccountId.flatMap { idPattern.matches($0) ? $0 : nil }
        let owner = try bind(token: token, read: read, event: event, candidate: claimed ?? poster, now: readAt, on: db)
        if read.kind == .subscription { event.purchasedAt = try Self.periodStart(event, on: db) }
        if providerEventId == nil {
            guard let id = try Self.pullEventId(event, on: db) else {
                let nothing = EventIngestion.Outcome(duplicate: true, status: nil, eventId: nil, users: [])
                return Recorded(ingestion: nothing, owner: owner)
            }
            event.providerEventId = id
        }
        var stored = payload
        stored[read.kind == .subscription ? "subscription" : "product"] = read.payload
        let candidates = owner.map { [$0] } ?? (claimed ?? poster).map { [$0] } ?? []
        let outcome = try EventIngestion.record(
            EventIngestion.Delivery(event: event, payload: .value(.object(stored)), candidates: candidates), now: readAt, on: db)
        return Recorded(ingestion: outcome, owner: owner)
    }

    /// The purchase token of a Play subscription id the server knows, and what it is.
    static func token(of subscriptionId: String, on db: DatabaseConnection) throws(DatabaseError) -> (String, GooglePlayRead.Kind)? {
        guard
            let row = try db.queryOne(
                "SELECT purchase_token, product_type FROM billing_google_purchases WHERE subscription_id = \(subscriptionId)")
        else { return nil }
        return (try row.string("purchase_token"), GooglePlayRead.Kind(rawValue: try row.string("product_type")) ?? .subscription)
    }

    /// Google refunds a purchase not acknowledged within three days of its `startTime`.
    static let acknowledgementWindowMilliseconds: Int64 = 3 * 86_400_000

    /// States Google counts as paid (`isAcknowledgeable`), as SQL: a subscription's and a
    /// one-time product's.
    static let acknowledgeableStates: [SQLValue] =
        GooglePlaySubscription.State.allCases.filter(\.isAcknowledgeable).map { .string($0.rawValue) }
        + [.string(GooglePlayProductPurchase.State.purchased.rawValue)]

    /// Paid purchases not acknowledged yet whose three days are not over (a day beyond, in
    /// case Google was late too), not claimed by a live acknowledgement and not pulled within
    /// the sweeper's interval, the nearest to the limit first: what the sweeper acknowledges.
    static func unacknowledged(now: Timestamp, limit: Int, on db: DatabaseConnection) throws(DatabaseError) -> [String] {
        try db.query(
            """
            SELECT g.subscription_id FROM billing_google_purchases g
            LEFT JOIN billing_reconcile_state r ON r.provider = 'google' AND r.subscription_id = g.subscription_id
            WHERE g.acknowledged_at IS NULL AND g.state IN (\(list: acknowledgeableStates))
              AND g.started_at > \(now.adding(milliseconds: -acknowledgementWindowMilliseconds - 86_400_000))
              AND (g.ack_claimed_at IS NULL OR g.ack_claimed_at < \(now.adding(milliseconds: -60_000)))
              AND (r.next_attempt_at IS NULL OR r.next_attempt_at <= \(now))
            ORDER BY g.started_at LIMIT \(limit)
            """
        ).map { (row) throws(DatabaseError) -> String in try row.string("subscription_id") }
    }

    /// Records what a push says without a state to read (a voided purchase, a test, a kind
    /// this server does not fold yet) for the token's owner, in its own transaction.
    func recordNotice(_ event: StoreEvent, payload: JSONObject, now: Timestamp, on db: DatabaseConnection) throws -> EventIngestion.Outcome {
        try db.transaction(retries: 3, isolation: .readCommitted) { db in
            try recordNoticeInTransaction(event, payload: payload, now: now, on: db)
        }
    }

    /// `recordNotice` inside the caller's open transaction (a quarantined push re-run).
    func recordNoticeInTransaction(
        _ event: StoreEvent, payload: JSONObject, now: Timestamp, on db: DatabaseConnection
    ) throws(DatabaseError) -> EventIngestion.Outcome {
        var owner: String?
        if let id = event.subscriptionId {
            owner = try db.queryOne("SELECT user_id FROM billing_google_purchases WHERE subscription_id = \(id) LOCK IN SHARE MODE")?
                .optionalString("user_id")
        }
        return try EventIngestion.record(
            EventIngestion.Delivery(event: event, payload: .value(.object(payload)), candidates: owner.map { [$0] } ?? []),
            now: now, on: db)
    }

    /// The token's owner (`billing_google_purchases.user_id`), read under a shared lock.
    static func owner(token: String, on db: DatabaseConnection) throws(DatabaseError) -> String? {
        try db.queryOne(
            "SELECT user_id FROM billing_google_purchases WHERE subscription_id = \(GooglePlayEvent.subscriptionId(token: token)) LOCK IN SHARE MODE"
        )?.optionalString("user_id")
    }

    /// Writes the token's row (its last read state, newest read wins) and decides its owner:
    /// the bound one, else `candidate` or the replaced token's owner when known — bound now,
    /// and the token's waiting events attached to him.
    private func bind(
        token: String, read: GooglePlayRead, event: StoreEvent, candidate: String?, now: Timestamp,
        on db: DatabaseConnection
    ) throws(DatabaseError) -> String? {
        guard let id = event.subscriptionId else { return nil }
        let row = try db.queryOne("SELECT user_id FROM billing_google_purchases WHERE subscription_id = \(id) FOR UPDATE")
        var owner = try row?.optionalString("user_id")
        var bound = false
        if owner == nil {
            var wanted = candidate
            if wanted == nil, let linked = event.replacesSubscriptionId {
                wanted = try db.queryOne("SELECT user_id FROM billing_google_purchases WHERE subscription_id = \(linked)")?
                    .optionalString("user_id")
            }
            if let wanted, try UserDirectory.knownUsers([wanted], on: db).contains(wanted) {
                owner = wanted
                bound = true
            }
        }
        let acknowledged = read.acknowledged ? now : nil
        try db.execute(
            """
            INSERT INTO billing_google_purchases (subscription_id, purchase_token, package_name, product_type, product_id, user_id,
              linked_subscription_id, environment, state, expires_at, started_at, acknowledged_at, pulled_at, created_at)
            VALUES (\(id), \(token), \(api.packageName), \(read.kind.rawValue), \(read.productId), \(owner),
              \(event.replacesSubscriptionId), \(event.environment.rawValue), \(read.state), \(event.expiresAt),
              \(read.startedAt), \(acknowledged), \(now), \(now))
            ON DUPLICATE KEY UPDATE
              user_id = COALESCE(user_id, VALUES(user_id)),
              product_id = IF(VALUES(pulled_at) >= pulled_at, COALESCE(VALUES(product_id), product_id), product_id),
              linked_subscription_id = COALESCE(linked_subscription_id, VALUES(linked_subscription_id)),
              state = IF(VALUES(pulled_at) >= pulled_at, VALUES(state), state),
              expires_at = IF(VALUES(pulled_at) >= pulled_at, VALUES(expires_at), expires_at),
              started_at = COALESCE(started_at, VALUES(started_at)),
              acknowledged_at = COALESCE(acknowledged_at, VALUES(acknowledged_at)),
              pulled_at = GREATEST(pulled_at, VALUES(pulled_at))
            """)
        if bound, let wanted = owner {
            // A first record of the token racing this one (no row to lock before the insert)
            // may have bound it first: its owner stands.
            owner = try db.queryOne("SELECT user_id FROM billing_google_purchases WHERE subscription_id = \(id)")?.optionalString("user_id")
            bound = owner == wanted
        }
        if bound, let owner {
            try BindingAudit.record(.bound, subscriptionId: id, userId: owner, policy: bindingPolicy, now: now, on: db)
            _ = try UserLock.lock(owner, now: now, on: db)
            if try EventInbox.attachUnmatched(subscriptionId: id, providers: Self.providers, to: owner, now: now, on: db) {
                _ = try AccessProjector.refold(userId: owner, now: now, on: db)
            }
        }
        return owner
    }

    /// The start of the paid period a Play subscription state is of, its `purchased_at`: Play
    /// states the subscription's `startTime` and each period's order (`transactionId`), never
    /// when a renewal's period began. Read under the token's row lock, from what the inbox
    /// already holds of the token's orders, so that every read of one order states one period
    /// and no two orders state the same one — the statistics' period key, each renewal a sale
    /// at its own price and day — whatever order the reads arrive in:
    /// - an order the inbox already has: the start recorded with it first;
    /// - the first order (no `..N` suffix), or no order: `startTime`;
    /// - a renewal's order `..N` new to the inbox: where the periods of the orders before it
    ///   (the first, `..0` … `..N-1`, not in a billing retry) ran to, else the read itself;
    ///   never before `startTime` nor after its own expiry; and strictly after the starts
    ///   recorded for earlier orders, strictly before those of later ones (a stale read of an
    ///   earlier order arriving after a later one).
    static func periodStart(_ event: StoreEvent, on db: DatabaseConnection) throws(DatabaseError) -> Timestamp? {
        guard let subscription = event.subscriptionId, let order = event.transactionId, let read = event.intrinsicAt else {
            return event.purchasedAt
        }
        var lower: (end: Timestamp?, start: Timestamp?) = (nil, nil)
        var higherStart: Timestamp?
        let index = orderIndex(order)
        for row in try db.query(
            """
            SELECT transaction_id, MIN(purchased_at) AS started,
              MAX(CASE WHEN kind = 'subscriber_state' AND in_billing_retry = 0 THEN expires_at END) AS ended
            FROM billing_events
            WHERE subscription_id = \(subscription) AND provider = \(EventProvider.googlePlay.rawValue) AND transaction_id IS NOT NULL
            GROUP BY transaction_id
            """)
        {
            let other = try row.string("transaction_id")
            let started = try row.optionalTimestamp("started")
            if other == order, let started { return started }
            if orderIndex(other) < index {
                lower.end = [lower.end, try row.optionalTimestamp("ended")].compactMap { $0 }.max()
                lower.start = [lower.start, started].compactMap { $0 }.max()
            } else if orderIndex(other) > index, let started {
                higherStart = min(higherStart ?? started, started)
            }
        }
        guard index >= 0 else { return event.purchasedAt }
        var start = lower.end ?? read
        if let expires = event.expiresAt { start = min(start, expires) }
        if let first = event.purchasedAt { start = max(start, first) }
        if let earlier = lower.start, start <= earlier { start = earlier.adding(milliseconds: 1) }
        if let later = higherStart, start >= later { start = later.adding(milliseconds: -1) }
        return start
    }

    /// A Play order's place among its subscription's: -1 for the first order, N for a
    /// renewal's `…..N`.
    static func orderIndex(_ order: String) -> Int {
        let parts = order.split(separator: ".", omittingEmptySubsequences: false)
        guard parts.count >= 3, parts[parts.count - 2].isEmpty, let n = Int(parts[parts.count - 1]), n >= 0 else { return -1 }
        return n
    }

    /// The inbox key of a state read without a push: `gpull:<subscription>:<digest>:<predecessor>`,
    /// where the predecessor is the token's newest Play event up to the read. nil — nothing to
    /// record — when that newest event is this very state read before: the same state read
    /// twice is one event, while a state that comes back after another (auto-renew off then
    /// on again) is news.
    static func pullEventId(_ event: StoreEvent, on db: DatabaseConnection) throws(DatabaseError) -> String? {
        guard let subscription = event.subscriptionId else { return nil }
        let prefix = "gpull:\(subscription.dropFirst(3).prefix(24)):\(GooglePlayEvent.digest(event)):"
        let newest = try db.queryOne(
            """
            SELECT e.id, e.provider_event_id FROM billing_events e
            WHERE e.subscription_id = \(subscription) AND e.provider = \(EventProvider.googlePlay.rawValue)
              AND e.intrinsic_at <= \(event.intrinsicAt)
            ORDER BY e.intrinsic_at DESC, e.id DESC LIMIT 1
            """)
        if let newest, try newest.string("provider_event_id").hasPrefix(prefix) { return nil }
        return prefix + String(try newest?.uint64("id") ?? 0)
    }
}
