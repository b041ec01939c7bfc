/// `events.list`, `events.reproject` and the inbox side of `events.retryQuarantined`.
enum EventAdmin {
    /// Inbox rows newest first (cursor = the last id seen), without payloads.
    static func list(
        userId: String?, provider: String?, status: String?, cursor: UInt64?, limit: Int,
        on db: DatabaseConnection
    ) throws(DatabaseError) -> (events: [JSON], nextCursor: UInt64?) {
        var query: SQLQuery = """
            SELECT e.id, e.provider, e.provider_event_id, e.user_id, e.event_type, e.kind, e.subscription_id, e.product_id,
              e.tier, e.environment, e.intrinsic_at, e.received_at, e.expires_at, e.price_milli, e.currency, e.status, e.status_reason
            FROM billing_events e WHERE 1 = 1
            """
        if let userId {
            query.append(
                " AND (e.user_id = \(userId) OR e.id IN (SELECT event_id FROM billing_event_parties WHERE user_id = \(userId)) OR e.id IN (SELECT event_id FROM billing_event_user_candidates WHERE candidate_id = \(userId)))"
            )
        }
        if let provider { query.append(" AND e.provider = \(provider)") }
        if let status { query.append(" AND e.status = \(status)") }
        if let cursor { query.append(" AND e.id < \(cursor)") }
        query.append(" ORDER BY e.id DESC LIMIT \(limit + 1)")
        let rows = try db.query(query)
        var events: [JSON] = []
        for row in rows.prefix(limit) {
            events.append([
                "id": .int(Int64(try row.uint64("id"))),
                "provider": .string(try row.string("provider")),
                "providerEventId": .string(try row.string("provider_event_id")),
                "userId": JSON(try row.optionalString("user_id")),
                "type": .string(try row.string("event_type")),
                "kind": .string(try row.string("kind")),
                "subscriptionId": JSON(try row.optionalString("subscription_id")),
                "productId": JSON(try row.optionalString("product_id")),
                "tier": JSON(try row.optionalString("tier")),
                "environment": .string(try row.string("environment")),
                "intrinsicAt": JSON(try row.optionalTimestamp("intrinsic_at")?.iso8601),
                "receivedAt": .string(try row.timestamp("received_at").iso8601),
                "expiresAt": JSON(try row.optionalTimestamp("expires_at")?.iso8601),
                "priceMilli": JSON(try row.optionalInt64("price_milli")),
                "currency": JSON(try row.optionalString("currency")),
                "status": .string(try row.string("status")),
                "statusReason": JSON(try row.optionalString("status_reason")),
            ])
        }
        let next = rows.count > limit ? try rows[limit - 1].uint64("id") : nil
        return (events, next)
    }

    /// One subscription whose stored row differs from the re-fold.
    struct Difference: Sendable, Equatable {
        var subscriptionId: String
        /// Field names that differ; `["missing"]`/`["extra"]` for a row only one side has.
        var fields: [String]

        var json: JSON { ["subscriptionId": .string(subscriptionId), "fields": .array(fields.map(JSON.string))] }
    }

    /// Compares stored subscriptions with a re-fold (pure).
    static func differences(stored: [SubscriptionState], folded: [SubscriptionState]) -> [Difference] {
        let storedById = Dictionary(stored.map { ($0.subscriptionId, $0) }, uniquingKeysWith: { a, _ in a })
        let foldedById = Dictionary(folded.map { ($0.subscriptionId, $0) }, uniquingKeysWith: { a, _ in a })
        var result: [Difference] = []
        for id in Set(storedById.keys).union(foldedById.keys).sorted() {
            switch (storedById[id], foldedById[id]) {
            case (nil, _?): result.append(Difference(subscriptionId: id, fields: ["missing"]))
            case (_?, nil): result.append(Difference(subscriptionId: id, fields: ["extra"]))
            case let (a?, b?) where a != b:
                var fields: [String] = []
                if a.productId != b.productId { fields.append("productId") }
                if a.tier != b.tier { fields.append("tier") }
                if a.phase != b.phase { fields.append("phase") }
                if a.willRenew != b.willRenew { fields.append("willRenew") }
                if a.inTrialPeriod != b.inTrialPeriod { fields.append("inTrialPeriod") }
                if a.expiresAt != b.expiresAt { fields.append("expiresAt") }
                if a.graceExpiresAt != b.graceExpiresAt { fields.append("graceExpiresAt") }
                if a.trialStartsAt != b.trialStartsAt || a.trialEndsAt != b.trialEndsAt { fields.append("trial") }
                if a.pendingChange != b.pendingChange { fields.append("pendingChange") }
                if a.lastEventAt != b.lastEventAt { fields.append("lastEventAt") }
                if fields.isEmpty { fields.append("other") }
                result.append(Difference(subscriptionId: id, fields: fields))
            default: break
            }
        }
        return result
    }

    /// Re-folds the user from the inbox under his lock, stores the result and reports what
    /// the stored rows had differently (empty: the stored projection was exact).
    static func reproject(
        userId: String, actor: String, now: Timestamp,
        on db: DatabaseConnection
    ) throws -> (differences: [Difference], result: AccessProjector.Result) {
        try db.transaction(retries: 3, isolation: .readCommitted) { db -> (differences: [Difference], result: AccessProjector.Result) in
            guard try UserDirectory.knownUsers([userId], on: db).contains(userId) else {
                throw BillingError.notFound("user", ["userId": .string(userId)])
            }
            try UserLock.lock(userId, now: now, on: db)
            let stored = try db.query(
                "SELECT \(unsafeRaw: SubscriptionState.columns) FROM billing_subscriptions s WHERE s.user_id = \(userId) ORDER BY s.subscription_id"
            )
            .map { (row) throws(DatabaseError) -> SubscriptionState in try SubscriptionState(row: row) }
            let result = try AccessProjector.refold(userId: userId, now: now, on: db)
            let differences = differences(stored: stored, folded: result.projection.subscriptions)
            try AuditLog.write(
                actor: actor, action: "events.reproject", targetUserId: userId,
                detail: ["differences": .array(differences.map(\.json)), "revision": .int(Int64(result.revision))],
                now: now, on: db)
            return (differences, result)
        }
    }
}
