/// The deliveries table (`billing_webhook_deliveries`): one row per endpoint and outbox row,
/// made by the fan-out, due at `next_attempt_at` while pending, sent one user at a time per
/// endpoint in outbox order.
enum WebhookDeliveries {
    /// A delivery due now, with what its body is made of.
    struct Due: Sendable, Equatable {
        var id: UInt64
        var outboxId: UInt64
        var attempts: Int
        var type: String
        var data: String
        /// The change's time: the body's `timestamp`.
        var changedAt: Timestamp
        /// When the delivery was made (or replayed): retries end three days after.
        var madeAt: Timestamp
    }

    /// Gives the outbox rows not yet fanned out (committed ones only: the dispatcher's
    /// transaction cannot see the others, which it meets on a later pass) one delivery per
    /// endpoint subscribed to their type, and marks them. Rows locked by another transaction
    /// (another dispatcher's pass, the live publisher marking them) are skipped, and with
    /// them every later row of their users: a user's rows are fanned out in id order, so
    /// his deliveries are made, and sent, in revision order. Answers how many rows it took.
    static func fanOut(
        endpoints: [BillingConfiguration.Webhooks.Endpoint], limit: Int, now: Timestamp, on db: DatabaseConnection
    ) throws -> Int {
        try db.transaction(retries: 3) { db in
            let locked = try db.query(
                """
                SELECT id, user_id, type FROM billing_outbox WHERE fanned_out_at IS NULL
                ORDER BY id LIMIT \(limit) FOR UPDATE SKIP LOCKED
                """)
            guard !locked.isEmpty else { return 0 }
            let rows = try inUserOrder(locked, on: db)
            guard !rows.isEmpty else { return 0 }
            var ids: [SQLValue] = []
            for row in rows {
                let id = try row.uint64("id")
                ids.append(.uint(id))
                let type = try row.string("type")
                for endpoint in endpoints where endpoint.events.contains(type) {
                    try db.execute(
                        """
                        INSERT IGNORE INTO billing_webhook_deliveries (endpoint_id, outbox_id, user_id, next_attempt_at, created_at)
                        VALUES (\(endpoint.id), \(id), \(try row.string("user_id")), \(now), \(now))
                        """)
                }
            }
            // By primary key only: a scan (the optimizer's choice on a small table) would wait on
            // the rows skipped above.
            try db.execute("UPDATE billing_outbox FORCE INDEX (PRIMARY) SET fanned_out_at = \(now) WHERE id IN (\(list: ids))")
            return rows.count
        }
    }

    /// The rows of `taken` (locked, in id order) that no earlier row of their user still
    /// waits for: his rows up to the first one of his not fanned out that `taken` lacks (by a
    /// consistent read, which sees another pass's rows as not fanned out until it commits).
    /// One statement for the whole batch (`billing_outbox_user`).
    private static func inUserOrder(_ taken: [SQLRow], on db: DatabaseConnection) throws -> [SQLRow] {
        var mine = Set<UInt64>()
        var users = Set<String>()
        for row in taken {
            mine.insert(try row.uint64("id"))
            users.insert(try row.string("user_id"))
        }
        var gap: [String: UInt64] = [:]
        for row in try db.query(
            """
            SELECT id, user_id FROM billing_outbox
            WHERE user_id IN (\(list: users.sorted().map(SQLValue.string))) AND fanned_out_at IS NULL AND id <= \(mine.max() ?? 0)
            ORDER BY id
            """)
        {
            let id = try row.uint64("id")
            let user = try row.string("user_id")
            if !mine.contains(id) && gap[user] == nil { gap[user] = id }
        }
        return try taken.filter { row in
            guard let first = gap[try row.string("user_id")] else { return true }
            return try row.uint64("id") < first
        }
    }

    /// Pending deliveries of `endpointId` due at `now`, at most one per user: his earliest
    /// pending one (a later change of his waits for it, retries included); the longest due
    /// first, so the retries of a dead endpoint's old deliveries do not starve a new one.
    static func due(endpointId: String, limit: Int, now: Timestamp, on db: DatabaseConnection) throws(DatabaseError) -> [Due] {
        try db.query(
            """
            SELECT d.id, d.outbox_id, d.attempts, d.created_at AS made_at, o.type, o.data, o.created_at FROM billing_webhook_deliveries d
            JOIN billing_outbox o ON o.id = d.outbox_id
            WHERE d.endpoint_id = \(endpointId) AND d.status = 'pending' AND d.next_attempt_at <= \(now)
              AND NOT EXISTS (
                SELECT 1 FROM billing_webhook_deliveries e
                WHERE e.endpoint_id = d.endpoint_id AND e.user_id = d.user_id AND e.status = 'pending' AND e.outbox_id < d.outbox_id)
            ORDER BY d.next_attempt_at, d.outbox_id LIMIT \(limit)
            """
        ).map { (row) throws(DatabaseError) -> Due in
            Due(
                id: try row.uint64("id"), outboxId: try row.uint64("outbox_id"), attempts: try row.int("attempts"),
                type: try row.string("type"), data: try row.string("data"), changedAt: try row.timestamp("created_at"),
                madeAt: try row.timestamp("made_at"))
        }
    }

    /// What one attempt came to.
    enum Attempt: Sendable, Equatable {
        case delivered(status: Int)
        /// Retried at `retryAt`, or failed for good when nil.
        case failed(status: Int?, error: String, retryAt: Timestamp?)
    }

    /// Records what became of the attempt made at `delivery` as it was read: only if the row is
    /// still that attempt's (a `webhooks.replay` in between made it a new delivery, which is
    /// then sent again rather than marked by the older attempt's answer).
    static func record(_ attempt: Attempt, of delivery: Due, now: Timestamp, on db: DatabaseConnection) throws(DatabaseError) {
        let stillThisAttempt: SQLQuery =
            " WHERE id = \(delivery.id) AND status = 'pending' AND attempts = \(delivery.attempts) AND created_at = \(delivery.madeAt)"
        switch attempt {
        case .delivered(let status):
            try db.execute(
                """
                UPDATE billing_webhook_deliveries SET status = 'delivered', attempts = attempts + 1, last_attempt_at = \(now),
                  last_status = \(Int64(status)), last_error = NULL, delivered_at = \(now)
                """ + stillThisAttempt)
        case .failed(let status, let error, let retryAt):
            try db.execute(
                """
                UPDATE billing_webhook_deliveries SET status = \(retryAt == nil ? "failed" : "pending"), attempts = attempts + 1,
                  last_attempt_at = \(now), last_status = \(status.map(Int64.init)), last_error = \(String(error.prefix(255))),
                  next_attempt_at = \(retryAt ?? now)
                """ + stillThisAttempt)
        }
    }

    /// Removes outbox rows (and their deliveries) made before `before`, a bounded batch at a
    /// time; answers how many went.
    static func purge(before: Timestamp, batch: Int, on db: DatabaseConnection) throws(DatabaseError) -> Int {
        try db.execute("DELETE FROM billing_outbox WHERE created_at < \(before) ORDER BY id LIMIT \(batch)").affectedRows
    }
}
