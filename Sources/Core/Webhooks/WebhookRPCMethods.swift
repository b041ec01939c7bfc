extension RPCMethodRegistry where Context: RPCContextProtocol {
    /// `webhooks.list`, `webhooks.deliveries`, `webhooks.replay` (SPEC §16) over the
    /// configured `endpoints`.
    mutating func registerWebhookMethods(endpoints: [BillingConfiguration.Webhooks.Endpoint]) {
        @Sendable func endpoint(_ params: RPCParams) throws -> BillingConfiguration.Webhooks.Endpoint {
            let id = try params.requireString("endpointId", maxLength: 64)
            guard let endpoint = endpoints.first(where: { $0.id == id }) else {
                throw BillingError.notFound("webhook endpoint", ["endpointId": .string(id)])
            }
            return endpoint
        }
        register(
            "webhooks.list",
            summary:
                "The configured webhook endpoints (never their secrets) with their deliveries by status, the oldest pending one's age (lag) and the last delivery and error; and the outbox rows not yet fanned out",
            params: "{}"
        ) { request, context in
            try request.params.expectOnly()
            let db = try context.requireDatabase()
            let now = context.clock.now()
            var listed: [JSON] = []
            for endpoint in endpoints {
                listed.append(try WebhookAdmin.summary(of: endpoint, now: now, on: db))
            }
            return ["endpoints": .array(listed), "outbox": try WebhookAdmin.queue(now: now, on: db)]
        }
        register(
            "webhooks.deliveries",
            summary: "One endpoint's deliveries newest first, with each one's attempts, last answer and error (page with nextCursor)",
            params: "{endpointId, status?: pending|delivered|failed, cursor?, limit? (1-500, default 100)}"
        ) { request, context in
            let p = request.params
            try p.expectOnly("endpointId", "status", "cursor", "limit")
            let target = try endpoint(p)
            let status = try p.optionalString("status", oneOf: ["pending", "delivered", "failed"])
            let cursor = try p.optionalInt("cursor", in: 1...Int.max).map(UInt64.init)
            let limit = try p.optionalInt("limit", in: 1...500) ?? 100
            let page = try WebhookAdmin.deliveries(
                endpointId: target.id, status: status, cursor: cursor, limit: limit, on: try context.requireDatabase())
            return ["deliveries": .array(page.deliveries), "nextCursor": page.nextCursor.map { .int(Int64($0)) } ?? .null]
        }
        register(
            "webhooks.replay",
            summary:
                "Send again, signed afresh: one delivery (deliveryId), or every change from an outbox id on (fromId, including those made before the endpoint existed); each starts a new three days of retries; audited",
            params: "{endpointId, fromId | deliveryId, actor}"
        ) { request, context in
            let p = request.params
            try p.expectOnly("endpointId", "fromId", "deliveryId", "actor")
            let target = try endpoint(p)
            let actor = try p.requireActor()
            let fromId = try p.optionalInt("fromId", in: 1...Int.max).map(UInt64.init)
            let deliveryId = try p.optionalInt("deliveryId", in: 1...Int.max).map(UInt64.init)
            guard (fromId == nil) != (deliveryId == nil) else {
                throw RPCError.invalidParams("give exactly one of \"fromId\" and \"deliveryId\"")
            }
            let db = try context.requireDatabase()
            let replayed = try WebhookAdmin.replay(
                endpoint: target, fromId: fromId, deliveryId: deliveryId, actor: actor, now: context.clock.now(), on: db)
            return ["endpointId": .string(target.id), "replayed": .int(Int64(replayed))]
        }
    }
}

/// What the `webhooks.*` calls read and change.
enum WebhookAdmin {
    static func summary(of endpoint: BillingConfiguration.Webhooks.Endpoint, now: Timestamp, on db: DatabaseConnection)
        throws(DatabaseError) -> JSON
    {
        var counts: JSONObject = ["pending": 0, "delivered": 0, "failed": 0]
        var oldestPending: Timestamp?
        for row in try db.query(
            """
            SELECT status, COUNT(*) AS n, MIN(created_at) AS oldest FROM billing_webhook_deliveries
            WHERE endpoint_id = \(endpoint.id) GROUP BY status
            """)
        {
            let status = try row.string("status")
            counts[status] = .int(try row.int64("n"))
            if status == "pending" { oldestPending = try row.optionalTimestamp("oldest") }
        }
        let last = try db.queryOne(
            """
            SELECT MAX(delivered_at) AS delivered FROM billing_webhook_deliveries
            WHERE endpoint_id = \(endpoint.id) AND status = 'delivered'
            """)
        let failing = try db.queryOne(
            """
            SELECT last_error, last_attempt_at FROM billing_webhook_deliveries
            WHERE endpoint_id = \(endpoint.id) AND status = 'pending' AND attempts > 0 ORDER BY next_attempt_at LIMIT 1
            """)
        return [
            "id": .string(endpoint.id), "url": .string(endpoint.url), "events": .array(endpoint.events.map(JSON.string)),
            "deliveries": .object(counts),
            "lagSeconds": .int(oldestPending.map { max(0, (now.millisecondsSinceEpoch - $0.millisecondsSinceEpoch) / 1000) } ?? 0),
            "oldestPendingAt": JSON(oldestPending?.iso8601),
            "lastDeliveredAt": JSON(try last?.optionalTimestamp("delivered")?.iso8601),
            "retrying": try failing.map { (row) throws(DatabaseError) -> JSON in
                [
                    "lastError": JSON(try row.optionalString("last_error")),
                    "lastAttemptAt": JSON(try row.optionalTimestamp("last_attempt_at")?.iso8601),
                ]
            } ?? .null,
        ]
    }

    /// The outbox rows committed and not yet fanned out.
    static func queue(now: Timestamp, on db: DatabaseConnection) throws(DatabaseError) -> JSON {
        let row = try db.queryOne("SELECT COUNT(*) AS n, MIN(created_at) AS oldest FROM billing_outbox WHERE fanned_out_at IS NULL")
        return ["queued": .int(try row?.int64("n") ?? 0), "oldestQueuedAt": JSON(try row?.optionalTimestamp("oldest")?.iso8601)]
    }

    static func deliveries(
        endpointId: String, status: String?, cursor: UInt64?, limit: Int, on db: DatabaseConnection
    ) throws(DatabaseError) -> (deliveries: [JSON], nextCursor: UInt64?) {
        var query: SQLQuery = """
            SELECT d.id, d.outbox_id, d.user_id, d.status, d.attempts, d.next_attempt_at, d.last_attempt_at, d.last_status,
              d.last_error, d.delivered_at, d.created_at, o.type, o.revision, o.created_at AS changed_at
            FROM billing_webhook_deliveries d JOIN billing_outbox o ON o.id = d.outbox_id
            WHERE d.endpoint_id = \(endpointId)
            """
        if let status { query.append(" AND d.status = \(status)") }
        if let cursor { query.append(" AND d.id < \(cursor)") }
        query.append(" ORDER BY d.id DESC LIMIT \(limit + 1)")
        let rows = try db.query(query)
        var page: [JSON] = []
        for row in rows.prefix(limit) {
            let status = try row.string("status")
            page.append([
                "id": .int(Int64(try row.uint64("id"))), "outboxId": .int(Int64(try row.uint64("outbox_id"))),
                "type": .string(try row.string("type")), "userId": .string(try row.string("user_id")),
                "revision": .int(Int64(try row.uint64("revision"))), "changedAt": .string(try row.timestamp("changed_at").iso8601),
                "status": .string(status), "attempts": .int(try row.int64("attempts")),
                "nextAttemptAt": status == "pending" ? .string(try row.timestamp("next_attempt_at").iso8601) : .null,
                "lastAttemptAt": JSON(try row.optionalTimestamp("last_attempt_at")?.iso8601),
                "lastStatus": JSON(try row.optionalInt64("last_status")), "lastError": JSON(try row.optionalString("last_error")),
                "deliveredAt": JSON(try row.optionalTimestamp("delivered_at")?.iso8601),
                "createdAt": .string(try row.timestamp("created_at").iso8601),
            ])
        }
        let next = rows.count > limit ? try rows[limit - 1].uint64("id") : nil
        return (page, next)
    }

    /// Makes the deliveries pending again, due now, with a fresh three days of retries; from
    /// `fromId` also makes those the endpoint never had (it was added after the change).
    static func replay(
        endpoint: BillingConfiguration.Webhooks.Endpoint, fromId: UInt64?, deliveryId: UInt64?, actor: String, now: Timestamp,
        on db: DatabaseConnection
    ) throws -> Int {
        try db.transaction(retries: 3) { db in
            let reset: SQLQuery = """
                UPDATE billing_webhook_deliveries SET status = 'pending', attempts = 0, next_attempt_at = \(now), delivered_at = NULL,
                  last_error = NULL, last_status = NULL, created_at = \(now)
                """
            var replayed = 0
            if let deliveryId {
                var query = reset
                query.append(" WHERE id = \(deliveryId) AND endpoint_id = \(endpoint.id)")
                replayed = try db.execute(query).affectedRows
                if replayed == 0,
                    try db.queryOne("SELECT 1 AS found FROM billing_webhook_deliveries WHERE id = \(deliveryId) AND endpoint_id = \(endpoint.id)")
                        == nil
                {
                    throw BillingError.notFound("webhook delivery", ["endpointId": .string(endpoint.id), "deliveryId": .int(Int64(deliveryId))])
                }
            } else if let from = fromId {
                var query = reset
                query.append(" WHERE endpoint_id = \(endpoint.id) AND outbox_id >= \(from)")
                replayed = try db.execute(query).affectedRows
                replayed += try db.execute(
                    """
                    INSERT IGNORE INTO billing_webhook_deliveries (endpoint_id, outbox_id, user_id, next_attempt_at, created_at)
                    SELECT \(endpoint.id), o.id, o.user_id, \(now), \(now) FROM billing_outbox o
                    WHERE o.id >= \(from) AND o.fanned_out_at IS NOT NULL AND o.type IN (\(list: endpoint.events.map(SQLValue.string)))
                    """
                ).affectedRows
            }
            var detail: JSONObject = ["endpointId": .string(endpoint.id), "replayed": .int(Int64(replayed))]
            if let fromId { detail["fromId"] = .int(Int64(fromId)) }
            if let deliveryId { detail["deliveryId"] = .int(Int64(deliveryId)) }
            try AuditLog.write(actor: actor, action: "webhooks.replay", detail: .object(detail), now: now, on: db)
            return replayed
        }
    }
}
