/// The transactional outbox (SPEC §16, table `billing_outbox`): what the rest of the world
/// learns of a user's access is written here, in the transaction that changed it, and only
/// here. billing-rpc's dispatcher (`WebhookDispatcher`) reads it after commit. With
/// `outbox.enabled` false (the connection's `writesOutbox`) nothing is written.
///
/// Rows are gathered along the transaction and written just before its COMMIT
/// (`beforeCommit`) in one statement, one `access.changed` per changed user however often he
/// changed, from what the transaction is about to commit: the user's access row lock is held
/// from his change to the commit, so one user's rows are numbered in revision order.
enum AccessOutbox {
    enum RowType: String, Sendable, CaseIterable {
        case accessChanged = "access.changed"
        case eventApplied = "event.applied"
    }

    /// `userId`'s effective access changed in the open transaction (his revision moved):
    /// an `access.changed` row is written before its COMMIT with the access as committed.
    static func accessChanged(_ userId: String, now: Timestamp, on db: DatabaseConnection) throws(DatabaseError) {
        guard db.configuration.writesOutbox else { return }
        let pending = try self.pending(on: db)
        if pending.changed.insert(userId).inserted { pending.rows.append(.changed(userId: userId, now: now)) }
    }

    /// The inbox event `eventId` was applied to `userId` in the open transaction: an
    /// `event.applied` row (the normalized event) is written before its COMMIT, ahead of the
    /// `access.changed` it caused.
    static func eventApplied(_ event: StoreEvent, eventId: UInt64, userId: String, now: Timestamp, on db: DatabaseConnection)
        throws(DatabaseError)
    {
        guard db.configuration.writesOutbox else { return }
        try pending(on: db).rows.append(.applied(event, eventId: eventId, userId: userId, now: now))
    }

    /// What the transaction will tell, in the order it happened; written by one step.
    private final class Pending {
        enum Row {
            case applied(StoreEvent, eventId: UInt64, userId: String, now: Timestamp)
            case changed(userId: String, now: Timestamp)
        }
        var rows: [Row] = []
        var changed: Set<String> = []
    }

    private static func pending(on db: DatabaseConnection) throws(DatabaseError) -> Pending {
        let pending = try db.transactionLocal("outbox") { Pending() }
        try db.beforeCommit(key: "outbox") { db in try write(pending, on: db) }
        return pending
    }

    /// The rows in one INSERT: each changed user's access read as the transaction is about to
    /// commit it (one statement each), each event with its owner's committed revision; the
    /// events first, so an event is told before the change it made.
    private static func write(_ pending: Pending, on db: DatabaseConnection) throws {
        var records: [String: AccessRecord] = [:]
        func record(_ userId: String, now: Timestamp) throws(DatabaseError) -> AccessRecord? {
            if let known = records[userId] { return known }
            let loaded = try AccessRecord.load(userId: userId, now: now, on: db)
            records[userId] = loaded
            return loaded
        }
        var values: [SQLQuery] = []
        for case .applied(let event, let eventId, let userId, let now) in pending.rows {
            guard let owner = try record(userId, now: now) else { continue }
            let data = event.appliedData(eventId: eventId, userId: userId, revision: owner.revision)
            values.append("(\(userId), \(RowType.eventApplied.rawValue), \(owner.revision), \(eventId), \(data), \(now))")
        }
        for case .changed(let userId, let now) in pending.rows {
            guard let committed = try record(userId, now: now) else { continue }
            let data = AccessSnapshot(record: committed, now: now, cadence: { _ in nil }).changeData
            values.append("(\(userId), \(RowType.accessChanged.rawValue), \(committed.revision), NULL, \(data), \(now))")
        }
        // At most 500 rows a statement: a campaign's thousands of members stay far below the
        // 65,535 placeholders a prepared statement may have.
        for start in stride(from: 0, to: values.count, by: 500) {
            var insert: SQLQuery = "INSERT INTO billing_outbox (user_id, type, revision, event_id, data, created_at) VALUES "
            for (offset, value) in values[start..<min(start + 500, values.count)].enumerated() {
                insert.append(offset == 0 ? value : ", " + value)
            }
            try db.execute(insert)
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
    func appliedData(eventId: UInt64, userId: String, revision: UInt64) -> JSON {
        [
            "userId": .string(userId), "revision": .int(Int64(revision)), "eventId": .int(Int64(eventId)),
            "provider": .string(provider.rawValue), "providerEventId": .string(providerEventId),
            "type": .string(rawType), "kind": .string(kind.rawValue), "occurredAt": JSON(intrinsicAt?.iso8601),
            "environment": .string(environment.rawValue), "platform": JSON(platform), "subscriptionId": JSON(subscriptionId),
            "productId": JSON(productId), "tier": JSON(tier?.rawValue), "periodType": JSON(periodType), "isTrial": .bool(isTrial),
            "expiresAt": JSON(expiresAt?.iso8601),
            "price": priceMilli.map { ["amountMilli": .int($0), "currency": JSON(currency)] } ?? .null,
        ]
    }
}
