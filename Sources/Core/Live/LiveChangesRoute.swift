import Glibc

/// `GET /api/v1/billing/access/changes?after=REVISION` (SPEC §16): the app waits for its
/// next access change. The worker only decides; nginx waits.
///
/// - The user's revision already exceeds what the app has (`after`, or the revision of the
///   stream event it last received, `Last-Event-ID`): the change is answered at once, as a
///   JSON document (long poll) or as one SSE event (`Accept: text/event-stream`) whose `id:`
///   the reconnecting stream sends back.
/// - Otherwise, with live changes on (`live.publisherSocket`), the request is redirected
///   inside nginx (`X-Accel-Redirect`) to the user's nchan channel, positioned just after
///   his latest published change: no worker thread waits (but for a request arriving within
///   the 0.1 s between a change's commit and its publication, which waits for that, at most
///   0.5 s). A long poll gets the next change or nchan's 408 after its timeout; a stream gets
///   every change as it is published.
/// - Live changes off: 304 at once (the app polls), or a stream told to reconnect later.
///
/// Each change is the `data` of an `access.changed` webhook: userId, revision, tier, phase,
/// source, sources, store, expiresAt, pendingChange. A change can arrive twice (a
/// reconnect, a publisher restarted mid-batch): its revision tells.
struct LiveChangesRoute: Sendable {
    let live: BillingConfiguration.Live

    /// The wait of a stream without live changes before it reconnects.
    static let pollingRetryMilliseconds = 30_000
    /// The wait of a stream that was answered at once before it reconnects.
    static let reconnectMilliseconds = 1_000

    func handle(_ request: HTTPRequest, _ context: some UserRequestContext) throws -> HTTPResponse {
        let userId = try context.authenticatedUser(request)
        let streams = Self.wantsStream(request.headers["Accept"])
        let after = try Self.after(request)
        let lastEventId = streams ? request.headers["Last-Event-ID"] ?? request.queryValue("last_event_id") : nil
        let db = try context.requireDatabase()
        let now = context.clock.now()
        let position = try db.readOnlySnapshot { db in
            try LivePosition.read(userId: userId, after: after, lastEventId: lastEventId, now: now, on: db)
        }
        if let change = position.change {
            return streams ? Self.event(change, revision: position.revision) : Self.document(change)
        }
        guard live.isEnabled else {
            if streams {
                return Self.stream("retry: \(Self.pollingRetryMilliseconds)\n: live changes are off: reconnect to poll\n\n")
            }
            return HTTPResponse(status: .notModified, headers: ["Cache-Control": "no-store"])
        }
        var messageId = position.latestMessageId
        if let pending = position.unpublished,
            now.millisecondsSinceEpoch - pending.createdAt.millisecondsSinceEpoch < Self.publicationWaitWindowMilliseconds
        {
            // His latest change committed but is not on the channel yet (the publisher takes
            // it within 0.1 s): an app waiting from now would get it as its next message
            // although it has it. Its message id, once there, is where the wait starts.
            messageId = try Self.awaitPublication(outboxId: pending.outboxId, on: db)
        }
        var target = (streams ? LiveChannel.streamPath : LiveChannel.pollPath) + LiveChannel.id(for: userId)
        if let messageId { target += "?last=" + messageId }
        return HTTPResponse(status: .ok, headers: ["X-Accel-Redirect": target, "X-Accel-Buffering": "no", "Cache-Control": "no-store"])
    }

    /// A change younger than this and not yet published is waited for (longer: the publisher
    /// is behind or down, and the app waits from now).
    static let publicationWaitWindowMilliseconds: Int64 = 2_000
    /// The longest a request waits for that publication, in steps of `publicationStepMicroseconds`.
    static let publicationWaitSteps = 20
    static let publicationStepMicroseconds: UInt32 = 25_000

    /// The nchan message id of outbox row `outboxId` once the publisher marked it (nil:
    /// passed over, or still not published after the longest wait, 0.5 s). Holds the thread
    /// only for a request arriving between a change's commit and its publication.
    static func awaitPublication(outboxId: UInt64, on db: DatabaseConnection) throws(DatabaseError) -> String? {
        for _ in 0..<publicationWaitSteps {
            usleep(publicationStepMicroseconds)
            guard
                let row = try db.queryOne("SELECT published_at IS NOT NULL AS published, live_message_id FROM billing_outbox WHERE id = \(outboxId)")
            else { return nil }
            if try row.bool("published") { return try row.optionalString("live_message_id") }
        }
        return nil
    }

    /// `after`: the revision the app has (0: none yet); required.
    static func after(_ request: HTTPRequest) throws(APIError) -> UInt64 {
        guard let text = request.queryValue("after") else {
            throw .badRequest("after: required, the revision the app has (GET /billing/access's revision; 0 for none)", code: "invalid_request")
        }
        guard (1...20).contains(text.utf8.count), text.utf8.allSatisfy({ (48...57).contains($0) }), let value = UInt64(text) else {
            throw .badRequest("after: expected a revision (a non-negative integer)", code: "invalid_request")
        }
        return value
    }

    /// Whether the app asks for an SSE stream (`Accept: text/event-stream`).
    static func wantsStream(_ accept: String?) -> Bool {
        guard let accept else { return false }
        return accept.split(separator: ",").contains { part in
            part.split(separator: ";").first.map { $0.trimmingSpaces().lowercased() == "text/event-stream" } ?? false
        }
    }

    static func document(_ change: JSON) -> HTTPResponse {
        var response = HTTPResponse.json(.ok, change)
        response.headers["Cache-Control"] = "no-store"
        return response
    }

    /// One SSE event, its id the revision (`r<revision>`), and the stream ended: the app's
    /// EventSource reconnects after `reconnectMilliseconds` and sends the id back.
    static func event(_ change: JSON, revision: UInt64) -> HTTPResponse {
        stream("retry: \(reconnectMilliseconds)\nid: r\(revision)\ndata: " + String(decoding: change.serialized(), as: UTF8.self) + "\n\n")
    }

    private static func stream(_ text: String) -> HTTPResponse {
        HTTPResponse(
            status: .ok, headers: ["Content-Type": "text/event-stream", "Cache-Control": "no-store", "X-Accel-Buffering": "no"],
            body: Array(text.utf8))
    }
}

/// Where a user's changes stand for a waiting app, read in one consistent snapshot.
struct LivePosition: Sendable {
    /// His committed revision (0: no access row yet).
    var revision: UInt64
    /// The revision the app acknowledged through `Last-Event-ID`: `r<revision>` (an event
    /// the worker answered) or an nchan message id his outbox row was published under;
    /// nil when absent or unknown (purged, or of another user).
    var acknowledged: UInt64?
    /// The nchan message id of his latest change when that change is the committed revision:
    /// a redirected app waits for what comes after it. nil: not yet published (the app then
    /// waits from now, and may get that change as its next message).
    var latestMessageId: String?
    /// His latest change when it is the committed revision and not yet published.
    var unpublished: (outboxId: UInt64, createdAt: Timestamp)?
    /// His access as of now in the `access.changed` shape when his revision is beyond what
    /// the app has (the acknowledged revision, else `after`): the answer; nil: wait.
    var change: JSON?

    static func read(userId: String, after: UInt64, lastEventId: String?, now: Timestamp, on db: DatabaseConnection)
        throws(DatabaseError) -> LivePosition
    {
        var revision: UInt64 = 0
        if let row = try db.queryOne("SELECT revision FROM billing_access WHERE user_id = \(userId)") { revision = try row.uint64("revision") }
        var position = LivePosition(revision: revision)
        if let lastEventId {
            if lastEventId.hasPrefix("r"), let acknowledged = UInt64(lastEventId.dropFirst()), lastEventId.utf8.count <= 21 {
                position.acknowledged = acknowledged
            } else if LiveChannel.isMessageId(lastEventId) {
                if let row = try db.queryOne(
                    """
                    SELECT revision FROM billing_outbox
                    WHERE user_id = \(userId) AND type = 'access.changed' AND live_message_id = \(lastEventId)
                    ORDER BY id DESC LIMIT 1
                    """)
                {
                    position.acknowledged = try row.uint64("revision")
                }
            }
        }
        if let latest = try db.queryOne(
            """
            SELECT id, revision, live_message_id, published_at IS NULL AS unpublished, created_at FROM billing_outbox
            WHERE user_id = \(userId) AND type = 'access.changed' ORDER BY id DESC LIMIT 1
            """), try latest.uint64("revision") == revision
        {
            position.latestMessageId = try latest.optionalString("live_message_id")
            if try latest.bool("unpublished") {
                position.unpublished = (try latest.uint64("id"), try latest.timestamp("created_at"))
            }
        }
        if revision > position.acknowledged ?? after, let record = try AccessRecord.load(userId: userId, now: now, on: db) {
            position.change = AccessSnapshot(record: record, now: now, cadence: { _ in nil }).changeData
        }
        return position
    }
}
