/// The transactional outbox (SPEC §16, table `billing_outbox`): what the rest of the world
/// learns of a user's access is written here, in the transaction that changed it, and only
/// here. billing-rpc's dispatcher (`WebhookDispatcher`) reads it after commit.
///
/// Rows are written just before COMMIT (`beforeCommit`), once per user and transaction, from
/// what the transaction is about to commit: the user's access row lock is held from his
/// change to the commit, so one user's rows are numbered in revision order.
enum AccessOutbox {
    enum RowType: String, Sendable, CaseIterable {
        case accessChanged = "access.changed"
        case eventApplied = "event.applied"
    }

    /// `userId`'s effective access changed in the open transaction (his revision moved):
    /// an `access.changed` row is written before its COMMIT with the access as committed.
    static func accessChanged(_ userId: String, now: Timestamp, on db: DatabaseConnection) throws(DatabaseError) {
        try db.beforeCommit(key: "access.changed " + userId) { db in
            guard let record = try AccessRecord.load(userId: userId, now: now, on: db) else { return }
            let snapshot = AccessSnapshot(record: record, now: now, cadence: { _ in nil })
            try db.execute(
                """
                INSERT INTO billing_outbox (user_id, type, revision, data, created_at)
                VALUES (\(userId), \(RowType.accessChanged.rawValue), \(record.revision), \(snapshot.changeData), \(now))
                """)
        }
    }

    /// The inbox event `eventId` was applied to `userId` in the open transaction: an
    /// `event.applied` row (the normalized event) is written before its COMMIT, ahead of the
    /// `access.changed` it caused.
    static func eventApplied(_ event: StoreEvent, eventId: UInt64, userId: String, now: Timestamp, on db: DatabaseConnection)
        throws(DatabaseError)
    {
        try db.beforeCommit(key: "event.applied \(eventId)") { db in
            // One statement: the revision the transaction is about to commit, into the row and its data.
            try db.execute(
                """
                INSERT INTO billing_outbox (user_id, type, revision, event_id, data, created_at)
                SELECT a.user_id, \(RowType.eventApplied.rawValue), a.revision, \(eventId),
                  JSON_SET(\(event.appliedData(eventId: eventId, userId: userId)), '$.revision', a.revision), \(now)
                FROM billing_access a WHERE a.user_id = \(userId)
                """)
        }
    }
}

extension AccessSnapshot {
    /// The `data` of an `access.changed` webhook (SPEC §16): who, at which revision, and what
    /// he may do as of the change; `expiresAt` is when the source deciding his tier ends.
    var changeData: JSON {
        guard case .object(let document) = json else { return .null }
        var data: JSONObject = [:]
        for key in ["userId", "revision", "tier", "phase", "source", "sources", "store"] { data[key] = document[key] ?? .null }
        data["expiresAt"] = JSON(sources.first { $0.tier == tier }?.expiresAt?.iso8601)
        data["pendingChange"] = document["pendingChange"] ?? .null
        return .object(data)
    }
}

extension StoreEvent {
    /// The `data` of an `event.applied` webhook: the inbox event as the server understood it,
    /// provider-independent (the raw type beside the normalized kind).
    /// `revision` is the database's to set (the one the event's transaction commits).
    func appliedData(eventId: UInt64, userId: String) -> JSON {
        [
            "userId": .string(userId), "revision": .null, "eventId": .int(Int64(eventId)),
            "provider": .string(provider.rawValue), "providerEventId": .string(providerEventId),
            "type": .string(rawType), "kind": .string(kind.rawValue), "occurredAt": JSON(intrinsicAt?.iso8601),
            "environment": .string(environment.rawValue), "platform": JSON(platform), "subscriptionId": JSON(subscriptionId),
            "productId": JSON(productId), "tier": JSON(tier?.rawValue), "periodType": JSON(periodType), "isTrial": .bool(isTrial),
            "expiresAt": JSON(expiresAt?.iso8601),
            "price": priceMilli.map { ["amountMilli": .int($0), "currency": JSON(currency)] } ?? .null,
        ]
    }
}
