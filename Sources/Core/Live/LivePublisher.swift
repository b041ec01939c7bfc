/// billing-rpc's live publisher (SPEC §16), a service of the daemon when
/// `live.publisherSocket` is set: each committed `access.changed` outbox row goes to its
/// user's nchan channel through nginx's publisher location on that Unix socket, in outbox
/// (= revision) order, within about `pollMilliseconds` of its commit; the row then notes
/// when and under which nchan message id (`published_at`, `live_message_id`), which
/// `GET /billing/access/changes` reads to wait for what comes after it.
///
/// At least once: a row is marked after nginx took it, so a publisher killed between the
/// two publishes it again (an app tells by the revision). A row older than nchan keeps
/// messages is passed over: an app waiting since before it meets it through its revision.
/// One publisher at a time per database server (a named lock on its connection), so one
/// user's changes reach his channel in order whatever the number of billing-rpc processes.
/// On a Galera cluster the lock is each node's own (as the migrator's `GET_LOCK` is):
/// billing-rpcs on two nodes may both publish, and an app may then get a change twice, an
/// older one after a newer one among them; its revision tells (docs/scaling.md).
struct LivePublisher: Sendable {
    let socket: LivePublisherSocket
    let clock: any BillingClock
    let logger: Logger
    let makeConnection: @Sendable () -> DatabaseConnection

    static let pollMilliseconds: Int64 = 100
    static let batch = 200

    /// A row of the publisher's queue.
    struct Pending: Sendable, Equatable {
        var outboxId: UInt64
        var userId: String
        var data: String
        var createdAt: Timestamp
    }

    func service() -> PeriodicService {
        PeriodicService(name: "live publisher", intervalMilliseconds: Self.pollMilliseconds) { [self] in
            let db = makeConnection()
            let session = CurlHTTPClient.Session()
            var failing = false
            return { isStopping in
                do {
                    guard try Self.holdsLock(on: db) else { return }
                    while !isStopping(), try publishPending(session: session, on: db, isStopping: isStopping) == Self.batch {}
                    if failing {
                        failing = false
                        logger.info("live.publisher.recovered", ["live.socket": .string(socket.path)])
                    }
                } catch {
                    // Once per outage, not every pass: nginx down, or the database.
                    if !failing {
                        failing = true
                        logger.error(
                            "live.publisher.failed", ["live.socket": .string(socket.path), "error.message": .string(String(describing: error))])
                    }
                }
            }
        }
    }

    /// One batch of the queue, oldest first: each row published (or passed over when older
    /// than nchan keeps messages), then the marks in one transaction. A publish that
    /// fails stops the batch: the rows published before it are marked, it and the rest stay
    /// queued, and the error is thrown. Answers how many rows the batch read.
    func publishPending(session: CurlHTTPClient.Session, on db: DatabaseConnection, isStopping: () -> Bool = { false }) throws -> Int {
        let rows = try Self.pending(limit: Self.batch, on: db)
        var published: [(UInt64, String?)] = []
        var stopped: (any Error)?
        let cutoff = clock.now().adding(seconds: -LiveChannel.keepsSeconds)
        for row in rows where !isStopping() {
            if row.createdAt < cutoff {
                published.append((row.outboxId, nil))
                continue
            }
            do {
                published.append((row.outboxId, try socket.publish(Array(row.data.utf8), to: row.userId, session: session)))
            } catch {
                stopped = error
                break
            }
        }
        try Self.markPublished(published, now: clock.now(), on: db)
        if let stopped { throw stopped }
        return rows.count
    }

    /// Whether this connection holds the publisher's lock (taking it when free).
    static func holdsLock(on db: DatabaseConnection) throws(DatabaseError) -> Bool {
        let row = try db.queryOne(
            "SELECT IF(IS_USED_LOCK('fcgibilling_live_publisher') = CONNECTION_ID(), 1, GET_LOCK('fcgibilling_live_publisher', 0)) AS held")
        return try row?.optionalInt("held") == 1
    }

    /// The committed `access.changed` rows not yet published, oldest first.
    static func pending(limit: Int, on db: DatabaseConnection) throws(DatabaseError) -> [Pending] {
        try db.query(
            """
            SELECT id, user_id, data, created_at FROM billing_outbox
            WHERE type = 'access.changed' AND published_at IS NULL ORDER BY id LIMIT \(limit)
            """
        ).map { row throws(DatabaseError) in
            Pending(
                outboxId: try row.uint64("id"), userId: try row.string("user_id"), data: try row.string("data"),
                createdAt: try row.timestamp("created_at"))
        }
    }

    /// Notes the rows as published (under their message ids; nil: passed over) in one
    /// statement, where it was one a row. The list is padded with its last row to a power of
    /// two (a repeated `WHEN` and `IN` value mean the same), so a batch of at most `batch`
    /// rows is one of eight statement texts for the connection's prepared-statement cache.
    static func markPublished(_ rows: [(UInt64, String?)], now: Timestamp, on db: DatabaseConnection) throws {
        guard let last = rows.last else { return }
        var size = 1
        while size < rows.count { size *= 2 }
        let rows = rows + Array(repeating: last, count: size - rows.count)
        var messageIds: SQLQuery = "CASE id"
        for (id, messageId) in rows { messageIds.append(" WHEN \(id) THEN \(messageId)") }
        messageIds.append(" END")
        _ = try db.transaction(retries: 3) { db in
            try db.execute(
                """
                UPDATE billing_outbox SET published_at = \(now), live_message_id = \(messageIds)
                WHERE id IN (\(list: rows.map { SQLValue.uint($0.0) }))
                """)
        }
    }
}
