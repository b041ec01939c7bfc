/// What the inbox stores of a delivery (`billing_events.payload`): a JSON value, serialized
/// when the row is written, or the text the request's parser already serialized from its own
/// tree (`JSON.parse(_:limits:serializingMember:)`: the same bytes, without building a
/// second jansson tree from the Swift value).
enum StoredPayload: Sendable, ExpressibleByDictionaryLiteral {
    case value(JSON)
    case text([UInt8])

    init(dictionaryLiteral elements: (String, JSON)...) {
        self = .value(.object(JSONObject(elements)))
    }

    /// The compact JSON text that is stored.
    var serialized: [UInt8] {
        switch self {
        case .value(let json): return json.serialized()
        case .text(let bytes): return bytes
        }
    }
}

extension StoredPayload {
    /// The payload with `identities` (erased ids) scrubbed (`PersonalData.scrub`), replaced
    /// by a tombstone linked to nobody: a delivery naming an erased user after his erasure.
    func scrubbed(identities: Set<String>) -> StoredPayload {
        let json: JSON
        switch self {
        case .value(let value): json = value
        case .text(let bytes):
            guard let value = try? JSON.parse(bytes, limits: PersonalData.storedLimits) else { return self }
            json = value
        }
        return .value(PersonalData.scrub(json, identities: identities, tombstone: ErasedUsers.tombstonePrefix + "unlinked"))
    }
}

/// The inbox (`billing_events`) seen from the fold: writing a normalized delivery once and
/// reading a user's applied events back as `StoreEvent`s.
enum EventInbox {
    enum Status: String, Sendable {
        case applied, unmatched, ignored, failed
    }

    /// The columns `StoreEvent(row:)` reads, for SELECTs (`e.` prefixed).
    static let columns = """
        e.id, e.provider, e.provider_event_id, e.event_type, e.kind, e.intrinsic_at, e.subscription_id, e.product_id,
        e.tier, e.period_type, e.is_trial, e.family_shared, e.environment, e.store, e.purchased_at, e.expires_at, e.grace_expires_at,
        e.price_milli, e.currency, e.reason, e.new_product_id, e.new_tier, e.effective_at, e.will_renew,
        e.in_billing_retry, e.expiration_intent, e.linked_subscription_id
        """

    /// Inserts the delivery; nil when the provider event id is already in the inbox (the
    /// unique key decides, not this code). Must run inside the caller's transaction.
    static func insert(
        _ event: StoreEvent, payload: StoredPayload, userId: String?, status: Status,
        statusReason: String?, receivedAt: Timestamp,
        on db: DatabaseConnection
    ) throws(DatabaseError) -> UInt64? {
        do {
            let result = try db.execute(
                """
                INSERT INTO billing_events (provider, provider_event_id, user_id, event_type, kind, subscription_id,
                  product_id, new_product_id, new_tier, effective_at, will_renew, in_billing_retry, expiration_intent, linked_subscription_id, tier, period_type, is_trial, family_shared, price_milli,
                  currency, store, reason, environment, purchased_at, expires_at, grace_expires_at, intrinsic_at,
                  received_at, applied_at, status, status_reason, transaction_id, payload)
                VALUES (\(event.provider.rawValue), \(event.providerEventId), \(userId), \(event.rawType), \(event.kind.rawValue),
                  \(event.subscriptionId), \(event.productId), \(event.newProductId), \(event.newTier?.rawValue),
                  \(event.effectiveAt), \(event.willRenew), \(event.inBillingRetry), \(event.expirationIntent.map(Int64.init)), \(event.replacesSubscriptionId),
                  \(event.tier?.rawValue), \(storedPeriodType(event.periodType)),
                  \(event.isTrial), \(event.familyShared), \(event.priceMilli), \(event.currency), \(event.platform), \(event.cancelReason),
                  \(event.environment.rawValue), \(event.purchasedAt), \(event.expiresAt), \(event.graceExpiresAt),
                  \(event.intrinsicAt), \(receivedAt), \(status == .applied ? receivedAt : nil), \(status.rawValue),
                  \(statusReason), \(event.transactionId), \(String(decoding: payload.serialized, as: UTF8.self)))
                """)
            return result.lastInsertID
        } catch  where error.isDuplicateKey {
            return nil
        }
    }

    /// Provider period types as the schema stores them (lowercase, a known set).
    static func storedPeriodType(_ value: String?) -> String? {
        guard let value = value?.lowercased() else { return nil }
        return ["normal", "trial", "intro", "promotional", "prepaid"].contains(value) ? value : nil
    }

    /// Links an applied event to the known users it concerns.
    static func addParty(eventId: UInt64, userId: String, role: PartyRole, on db: DatabaseConnection) throws(DatabaseError) {
        try db.execute(
            """
            INSERT INTO billing_event_parties (user_id, event_id, role) VALUES (\(userId), \(eventId), \(role.rawValue))
            ON DUPLICATE KEY UPDATE role = role
            """)
    }

    /// Remembers ids that may name a user later, so the event folds in when he appears.
    static func addCandidates(eventId: UInt64, ids: [String], role: PartyRole, on db: DatabaseConnection) throws(DatabaseError) {
        for id in ids {
            try db.execute(
                """
                INSERT INTO billing_event_user_candidates (candidate_id, event_id, role) VALUES (\(id), \(eventId), \(role.rawValue))
                ON DUPLICATE KEY UPDATE role = VALUES(role)
                """)
        }
    }

    /// Attaches the subscription's unmatched events of `providers` to `userId`, its owner now
    /// (a store binding decided). Returns true when some event was attached (the caller
    /// re-folds `userId`). Must run inside the caller's transaction.
    static func attachUnmatched(
        subscriptionId: String, providers: [SQLValue], to userId: String, now: Timestamp,
        on db: DatabaseConnection
    ) throws(DatabaseError) -> Bool {
        let waiting = try db.query(
            """
            SELECT id FROM billing_events WHERE subscription_id = \(subscriptionId) AND provider IN (\(list: providers))
              AND status = 'unmatched' FOR UPDATE
            """)
        for row in waiting {
            let eventId = try row.uint64("id")
            try addParty(eventId: eventId, userId: userId, role: .subject, on: db)
            try db.execute(
                """
                UPDATE billing_events SET status = 'applied', user_id = \(userId), applied_at = \(now)
                WHERE id = \(eventId) AND status = 'unmatched'
                """)
            try db.execute("DELETE FROM billing_event_user_candidates WHERE event_id = \(eventId)")
        }
        return !waiting.isEmpty
    }

    /// Moves the subject of the subscription's events of `providers` from `owner` to `userId`
    /// (a restore under `binding.policy restore_moves`), in the caller's transaction; both
    /// users' locks are the caller's to take first, and their re-folds. Events another
    /// provider delivered (RevenueCat's) stay with whoever that provider named.
    static func moveSubject(
        subscriptionId: String, providers: [SQLValue], from owner: String, to userId: String, now: Timestamp,
        on db: DatabaseConnection
    ) throws(DatabaseError) {
        let moving = try db.query(
            """
            SELECT e.id FROM billing_events e JOIN billing_event_parties p ON p.event_id = e.id
            WHERE e.subscription_id = \(subscriptionId) AND e.provider IN (\(list: providers))
              AND p.user_id = \(owner) AND p.role = 'subject'
            """)
        for event in moving {
            let eventId = try event.uint64("id")
            try db.execute("DELETE FROM billing_event_parties WHERE user_id = \(owner) AND event_id = \(eventId)")
            try addParty(eventId: eventId, userId: userId, role: .subject, on: db)
            try db.execute("UPDATE billing_events SET user_id = \(userId), applied_at = \(now) WHERE id = \(eventId)")
        }
    }

    enum PartyRole: String, Sendable {
        case subject
        case transferFrom = "transfer_from"
        case transferTo = "transfer_to"
    }
}

extension StoreEvent {
    /// An inbox row read back (columns `EventInbox.columns`).
    init(row: SQLRow) throws(DatabaseError) {
        func tier(_ column: String) throws(DatabaseError) -> Tier? {
            try row.optionalString(column).flatMap(Tier.init(rawValue:))
        }
        let periodType = try row.optionalString("period_type")?.uppercased()
        let willRenew = try row.optionalInt64("will_renew").map { $0 != 0 }
        self.init(
            provider: EventProvider(rawValue: try row.string("provider")) ?? .revenuecat,
            providerEventId: try row.string("provider_event_id"),
            rawType: try row.string("event_type"),
            kind: EventKind(rawValue: try row.string("kind")) ?? .unknown,
            intrinsicAt: try row.optionalTimestamp("intrinsic_at"),
            subscriptionId: try row.optionalString("subscription_id"),
            productId: try row.optionalString("product_id"),
            tier: try tier("tier"),
            periodType: periodType,
            isTrial: try row.bool("is_trial"),
            environment: StoreEnvironment(rawValue: try row.string("environment")) ?? .production,
            platform: try row.optionalString("store"),
            purchasedAt: try row.optionalTimestamp("purchased_at"),
            expiresAt: try row.optionalTimestamp("expires_at"),
            graceExpiresAt: try row.optionalTimestamp("grace_expires_at"),
            priceMilli: try row.optionalInt64("price_milli"),
            currency: try row.optionalString("currency"),
            cancelReason: try row.optionalString("reason"),
            newProductId: try row.optionalString("new_product_id"),
            newTier: try tier("new_tier"),
            effectiveAt: try row.optionalTimestamp("effective_at"),
            willRenew: willRenew,
            inBillingRetry: try row.optionalInt64("in_billing_retry").map { $0 != 0 },
            expirationIntent: try row.optionalInt64("expiration_intent").map { Int($0) },
            familyShared: try row.bool("family_shared"),
            replacesSubscriptionId: try row.optionalString("linked_subscription_id"))
    }
}
