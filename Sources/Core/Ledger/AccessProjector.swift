/// Re-folds a user's store access from the inbox and stores the result: the I/O around
/// the pure `StoreFold`.
///
/// Concurrency: the user's `billing_access` row is the lock. The caller's transaction must
/// run at READ COMMITTED, so that after waiting for the lock the fold reads every event
/// committed by the transaction it waited for: 50 concurrent events for one user then
/// serialize here and none is lost.
enum AccessProjector {
    struct Result: Sendable, Equatable {
        var revision: UInt64
        var changed: Bool
        var projection: StoreProjection
        /// Intrinsic time of the latest transfer in which this user gave his store access
        /// away; an earlier event of his arriving now must re-fold the receivers too.
        var lastTransferOutAt: Timestamp?
    }

    /// - Parameter newEvent: the event just added to the inbox for this user, when there is
    ///   one. If it sorts after everything already folded (the usual case: providers mostly
    ///   deliver in order), folding it onto the stored projection gives exactly what a
    ///   re-fold of every event would — the fold is a left fold in `foldOrder` and the
    ///   stored rows are the fold of the earlier events — so the inbox is not read again.
    ///   Anything else (a late event, a transfer, a provider-precedence switch) re-folds
    ///   from the inbox.
    ///   - locked: the user's access row as `lockKnownUser` read it earlier in this
    ///     transaction (its lock is held to commit, so nothing moved since); read here when nil.
    static func refold(
        userId: String, now: Timestamp, newEvent: StoreEvent? = nil, locked prelocked: LockedAccess? = nil,
        on db: DatabaseConnection
    ) throws(DatabaseError) -> Result {
        let locked: LockedAccess
        if let prelocked { locked = prelocked } else { locked = try lockAccessRowReadingStored(userId: userId, now: now, on: db) }
        let (revision, stored) = (locked.revision, locked.stored)
        let projection: StoreProjection
        var transfersOutAt: Timestamp?
        if let event = newEvent,
            let incremental = StoreFold.appending(
                event,
                to: StoreProjection(
                    subscriptions: stored, lastEventAt: locked.lastEventAt, appliedEvents: locked.appliedEvents))
        {
            projection = incremental
        } else {
            let events = try loadEvents(userId: userId, on: db)
            projection = StoreFold.fold(events, userId: userId)
            transfersOutAt = events.filter { $0.kind == .transfer && $0.transferredFrom.contains(userId) }.compactMap(\.intrinsicAt).max()
        }
        let changed = stored != projection.subscriptions
        if changed {
            try storeChanges(userId: userId, from: stored, to: projection.subscriptions, on: db)
            try AccessOutbox.accessChanged(userId, now: now, on: db)
        }
        let newRevision = changed ? revision + 1 : revision
        let primary = projection.primary(at: now)
        let granting = primary?.grantsAccess(at: now) ?? false
        try db.execute(
            """
            UPDATE billing_access SET revision = \(newRevision), tier = \(granting ? (primary?.tier ?? .free).rawValue : Tier.free.rawValue),
              phase = \((primary?.phase(at: now) ?? .none).rawValue), subscription_id = \(primary?.subscriptionId),
              product_id = \(primary?.productId), expires_at = \(primary?.expiresAt), will_renew = \(primary?.willRenew ?? false),
              last_event_at = \(projection.lastEventAt), applied_events = \(projection.appliedEvents), folded_at = \(now),
              updated_at = IF(\(changed), \(now), updated_at)
            WHERE user_id = \(userId)
            """)
        // On the incremental path the new event is later than every transfer folded, so no
        // receiver inherits it: nil is exact there.
        return Result(revision: newRevision, changed: changed, projection: projection, lastTransferOutAt: transfersOutAt)
    }

    /// Brings the user's stored subscription rows from `stored` to `folded`: writes only the
    /// rows that differ, deletes only the ones the fold no longer has (a subscription moved
    /// away). A renewal is then one upsert, where replacing every row was two statements.
    private static func storeChanges(
        userId: String, from stored: [SubscriptionState], to folded: [SubscriptionState],
        on db: DatabaseConnection
    ) throws(DatabaseError) {
        let before = Dictionary(stored.map { ($0.subscriptionId, $0) }, uniquingKeysWith: { first, _ in first })
        let kept = Set(folded.map(\.subscriptionId))
        for old in stored where !kept.contains(old.subscriptionId) {
            try db.execute("DELETE FROM billing_subscriptions WHERE user_id = \(userId) AND subscription_id = \(old.subscriptionId)")
        }
        for subscription in folded where before[subscription.subscriptionId] != subscription {
            try subscription.store(userId: userId, on: db)
        }
    }

    /// `UserLock.lock` that also reads the stored subscriptions in the locking statement:
    /// for a user whose access row exists (every user after his first event) one statement
    /// locks and reads; the row is created first only when that finds none (at read
    /// committed a locking read of a missing row takes no lock, so the two cannot deadlock).
    private static func lockAccessRowReadingStored(userId: String, now: Timestamp, on db: DatabaseConnection)
        throws(DatabaseError) -> LockedAccess
    {
        func lockAndRead() throws(DatabaseError) -> [SQLRow] {
            try db.query(
                """
                SELECT a.revision, a.last_event_at AS access_last_event_at, a.applied_events, \(unsafeRaw: SubscriptionState.columns) FROM billing_access a
                LEFT JOIN billing_subscriptions s ON s.user_id = a.user_id
                WHERE a.user_id = \(userId) FOR UPDATE
                """)
        }
        if let locked = try LockedAccess(rows: try lockAndRead()) { return locked }
        try db.execute(
            """
            INSERT INTO billing_access (user_id, revision, updated_at) VALUES (\(userId), 0, \(now))
            ON DUPLICATE KEY UPDATE user_id = user_id
            """)
        guard let locked = try LockedAccess(rows: try lockAndRead()) else {
            throw DatabaseError.misuse("billing_access row vanished under its lock")
        }
        return locked
    }

    /// A user's access row and stored subscriptions, read under the row's exclusive lock.
    struct LockedAccess: Sendable {
        var revision: UInt64
        var stored: [SubscriptionState]
        var lastEventAt: Timestamp?
        var appliedEvents: Int

        /// nil when the locking read found no access row.
        init?(rows: [SQLRow]) throws(DatabaseError) {
            guard let first = rows.first else { return nil }
            stored = []
            for row in rows where !row["subscription_id"].isNull { stored.append(try SubscriptionState(row: row)) }
            // In the fold's own order, so that an unchanged projection compares equal whatever
            // order the rows came in: sorted here, not by an ORDER BY, which made MariaDB
            // build a temporary table and sort it on every ingested event.
            stored.sort(by: SubscriptionState.projectionOrder)
            revision = try first.uint64("revision")
            lastEventAt = try first.optionalTimestamp("access_last_event_at")
            appliedEvents = try first.int("applied_events")
        }
    }

    /// When `userId` names a known, not deleted user with an access row: locks that row
    /// (and his `billing_users` row) and reads what `refold` needs, in one statement, the
    /// known-user lookup and the fold's locking read together. nil otherwise, and the caller
    /// looks the user up and folds him the usual way: an unknown or deleted id is left
    /// unlocked (at read committed a locking read keeps no lock on rows it does not return);
    /// a known user without an access row may keep his `billing_users` row locked to commit,
    /// which only orders him with himself.
    static func lockKnownUser(_ userId: String, on db: DatabaseConnection) throws(DatabaseError) -> LockedAccess? {
        try LockedAccess(
            rows: try db.query(
                """
                SELECT a.revision, a.last_event_at AS access_last_event_at, a.applied_events, \(unsafeRaw: SubscriptionState.columns) FROM billing_users u
                JOIN billing_access a ON a.user_id = u.id
                LEFT JOIN billing_subscriptions s ON s.user_id = a.user_id
                WHERE u.id = \(userId) AND u.deleted_at IS NULL FOR UPDATE
                """))
    }

    /// The user's applied events, and for each transfer *to* him the sender's events from
    /// before the transfer (the subscriptions that moved).
    static func loadEvents(userId: String, on db: DatabaseConnection) throws(DatabaseError) -> [StoreEvent] {
        let rows = try db.query(
            """
            SELECT \(unsafeRaw: EventInbox.columns), p.role FROM billing_event_parties p
            JOIN billing_events e ON e.id = p.event_id
            WHERE p.user_id = \(userId) AND e.status = 'applied'
            """)
        var events: [StoreEvent] = []
        var seen = Set<String>()
        for row in rows {
            var event = try StoreEvent(row: row)
            let role = try row.string("role")
            if event.kind == .transfer {
                if role == EventInbox.PartyRole.transferFrom.rawValue { event.transferredFrom = [userId] }
                if role == EventInbox.PartyRole.transferTo.rawValue {
                    event.transferredTo = [userId]
                    for inherited in try senderEvents(transferId: try row.uint64("id"), before: event.intrinsicAt, on: db)
                    where seen.insert(inherited.provider.rawValue + inherited.providerEventId).inserted {
                        events.append(inherited)
                    }
                }
            }
            if seen.insert(event.provider.rawValue + event.providerEventId).inserted { events.append(event) }
        }
        return events
    }

    /// The known receivers of the transfers made by `senders` after `after`: whose fold
    /// includes the senders' events from before (the inverse of `senderEvents`).
    static func transferReceivers(senders: [String], after: Timestamp, on db: DatabaseConnection) throws(DatabaseError) -> [String] {
        guard !senders.isEmpty else { return [] }
        let ids = senders.map(SQLValue.string)
        // Two indexed lookups from the senders' side (a UNION, not `IN (...) OR IN (...)`,
        // which MariaDB answers by scanning the whole inbox).
        // Locking reads: a transfer naming these senders that is being recorded concurrently
        // (its rows inserted, not committed) is waited for instead of passed over, so either
        // this delivery sees the transfer or the transfer's fold sees this delivery. For a
        // sender not yet known no access row serializes the two (see `senderEvents`).
        return try db.query(
            """
            (SELECT r.user_id FROM billing_event_parties s
            JOIN billing_events t ON t.id = s.event_id
            JOIN billing_event_parties r ON r.event_id = s.event_id AND r.role = 'transfer_to'
            WHERE s.user_id IN (\(list: ids)) AND s.role = 'transfer_from' AND t.intrinsic_at > \(after)
            LOCK IN SHARE MODE)
            UNION
            (SELECT r.user_id FROM billing_event_user_candidates c
            JOIN billing_events t ON t.id = c.event_id
            JOIN billing_event_parties r ON r.event_id = c.event_id AND r.role = 'transfer_to'
            WHERE c.candidate_id IN (\(list: ids)) AND c.role = 'transfer_from' AND t.intrinsic_at > \(after)
            LOCK IN SHARE MODE)
            """
        ).map { (row) throws(DatabaseError) -> String in try row.string("user_id") }
    }

    private static func senderEvents(transferId: UInt64, before: Timestamp?, on db: DatabaseConnection) throws(DatabaseError) -> [StoreEvent] {
        guard let before else { return [] }
        let senders = try db.query(
            """
            SELECT user_id AS id FROM billing_event_parties WHERE event_id = \(transferId) AND role = 'transfer_from'
            UNION SELECT candidate_id AS id FROM billing_event_user_candidates WHERE event_id = \(transferId) AND role = 'transfer_from'
            """
        ).map { (row) throws(DatabaseError) -> SQLValue in .string(try row.string("id")) }
        guard !senders.isEmpty else { return [] }
        // A UNION of two indexed lookups: `e.id IN (...) OR e.id IN (...)` scanned the inbox.
        // Locking reads: a sender's event being recorded concurrently is waited for, not
        // passed over (the other half of `transferReceivers`' handshake).
        return try db.query(
            """
            (SELECT \(unsafeRaw: EventInbox.columns) FROM billing_event_parties p
            JOIN billing_events e ON e.id = p.event_id
            WHERE p.user_id IN (\(list: senders)) AND p.role = 'subject'
              AND e.kind <> 'transfer' AND e.intrinsic_at < \(before) AND e.status IN ('applied', 'unmatched')
            LOCK IN SHARE MODE)
            UNION
            (SELECT \(unsafeRaw: EventInbox.columns) FROM billing_event_user_candidates c
            JOIN billing_events e ON e.id = c.event_id
            WHERE c.candidate_id IN (\(list: senders)) AND c.role = 'subject'
              AND e.kind <> 'transfer' AND e.intrinsic_at < \(before) AND e.status IN ('applied', 'unmatched')
            LOCK IN SHARE MODE)
            """
        ).map { (row) throws(DatabaseError) -> StoreEvent in try StoreEvent(row: row) }
    }
}
