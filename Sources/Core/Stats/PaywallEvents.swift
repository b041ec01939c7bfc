import Synchronization

/// `POST /api/v1/billing/paywall-events`: the app reports paywall views, dismissals and
/// purchase attempts for the funnel of `stats.subscriptions`, and a dismissal moves the
/// offer ladder (SPEC §14).
///
/// Body `{type: "view"|"dismiss"|"purchase", placement, eventId, offering?, result?,
/// environment?}`; Bearer ID token; `offering` (the one shown) is required for a dismissal.
/// The server records the offering's ladder stage on that placement and the contract
/// version. Idempotent by (user, eventId) — a UNIQUE key: a retry answers 200
/// `{recorded: true, duplicate: true}`, writes nothing and never advances the ladder twice;
/// a first delivery answers 201 (with `advanced`: whether a dismissal moved the ladder).
/// The row and the ladder step commit together.
/// Rows are kept 30 days: each worker process purges expired rows itself, at most once per
/// `purgeInterval`, in bounded batches, after answering a request (docs/stats.md).
struct PaywallEvents: Sendable {
    static let types = ["view", "dismiss", "purchase"]
    static let results = ["done", "cancelled", "failed", "pending"]
    /// How often one process runs the opportunistic purge, and how many rows per run.
    static let purgeIntervalMilliseconds: Int64 = 10 * 60 * 1000
    static let purgeBatch = 5000

    struct Report: Sendable, Equatable {
        var type: String
        var placement: String
        var eventId: String
        var offering: String?
        var result: String?
        var environment: StoreEnvironment
    }

    let offerings: OfferingCatalog
    /// When this process last purged expired paywall events.
    let purgeSchedule: PurgeSchedule

    func handle(_ request: HTTPRequest, _ context: some UserRequestContext) throws -> HTTPResponse {
        let userId = try context.authenticatedUser(request)
        let body = try request.jsonBody(limits: JSONLimits(maxBytes: 4096, maxDepth: 4))
        let report = try Self.decode(body)
        let db = try context.requireDatabase()
        let now = context.clock.now()
        let published = OfferingCatalog.version(in: try offerings.versions(on: db), at: now)
        let (inserted, advanced) = try Self.record(report, userId: userId, offerings: published, now: now, on: db)
        if purgeSchedule.isDue(now: now) { Self.purge(now: now, on: db, logger: context.logger) }
        var answer: JSONObject = ["recorded": true, "duplicate": .bool(!inserted)]
        if report.type == "dismiss" { answer["advanced"] = .bool(advanced) }
        return .json(inserted ? .created : .ok, .object(answer))
    }

    /// Records a report and, for a first dismissal of the offering at the ladder's current
    /// stage, moves the ladder, in one transaction. (inserted, advanced).
    static func record(
        _ report: Report, userId: String, offerings: PublishedContract<OfferingContract>, now: Timestamp,
        on db: DatabaseConnection
    ) throws -> (Bool, Bool) {
        let contract = offerings.contract
        let stage = report.offering.flatMap { OfferingLadder.stage(contract, placement: report.placement, offering: $0) }
        return try db.transaction(retries: 3) { db -> (Bool, Bool) in
            try ErasedUsers.holdLive(userId, on: db)  // 410 user_deleted (SPEC §19)
            guard try insert(report, userId: userId, stage: stage, offeringVersion: offerings.version, now: now, on: db) else {
                return (false, false)
            }
            guard report.type == "dismiss", let offering = report.offering,
                let step = OfferingLadder.advance(contract, placement: report.placement, dismissed: offering)
            else {
                return (true, false)
            }
            return (true, try OfferingLadder.advance(userId: userId, ladder: step.ladder, from: step.from, now: now, on: db))
        }
    }

    /// Records a report; false when (user, eventId) is already there (the UNIQUE key decides).
    static func insert(
        _ report: Report, userId: String, stage: Int? = nil, offeringVersion: Int? = nil, now: Timestamp,
        on db: DatabaseConnection
    ) throws(DatabaseError) -> Bool {
        do {
            try db.execute(
                """
                INSERT INTO billing_paywall_events (user_id, event_id, type, placement, offering, stage, offering_version,
                                                    result, environment, received_at)
                VALUES (\(userId), \(report.eventId), \(report.type), \(report.placement), \(report.offering), \(stage),
                        \(offeringVersion), \(report.result), \(report.environment.rawValue), \(now))
                """)
            return true
        } catch  where error.isDuplicateKey {
            return false
        }
    }

    /// An App Store promotional offer signed for the user (SPEC §17): an `offer_signed` row of
    /// the funnel, at the placement and ladder stage it was signed for. Each signature is its
    /// own row (`eventId`: the signature's own id).
    static func insertSignedOffer(
        userId: String, eventId: String, placement: String, offering: String, stage: Int?, offeringVersion: Int,
        productId: String, offerId: String, environment: StoreEnvironment, now: Timestamp, on db: DatabaseConnection
    ) throws(DatabaseError) {
        try db.execute(
            """
            INSERT INTO billing_paywall_events (user_id, event_id, type, placement, offering, stage, offering_version,
                                                product_id, offer_id, environment, received_at)
            VALUES (\(userId), \(eventId), 'offer_signed', \(placement), \(offering), \(stage), \(offeringVersion),
                    \(productId), \(offerId), \(environment.rawValue), \(now))
            """)
    }

    /// Validates a report (400 with the offending field otherwise).
    static func decode(_ body: JSON) throws(APIError) -> Report {
        guard case .object(let object) = body else { throw .badRequest("the body must be a JSON object") }
        for key in object.keys where !["type", "placement", "eventId", "offering", "result", "environment"].contains(key) {
            throw .badRequest("unknown field \"\(key)\"")
        }
        let type = try field(object, "type", required: true)!
        guard types.contains(type) else { throw .badRequest("\"type\" must be view, dismiss or purchase") }
        let placement = try field(object, "placement", required: true)!
        guard ClientToken.isValid(placement, maxLength: 64) else {
            throw .badRequest("\"placement\" must be 1 to 64 characters among letters, digits and . _ : -")
        }
        let eventId = try field(object, "eventId", required: true)!
        guard ClientToken.isValid(eventId, maxLength: 128) else {
            throw .badRequest("\"eventId\" must be 1 to 128 characters among letters, digits and . _ : -")
        }
        let offering = try field(object, "offering", required: type == "dismiss")
        if let offering, !ClientToken.isValid(offering, maxLength: 64) {
            throw .badRequest("\"offering\" must be 1 to 64 characters among letters, digits and . _ : -")
        }
        let result = try field(object, "result", required: false)
        if let result {
            guard type == "purchase" else { throw .badRequest("\"result\" is only for type purchase") }
            guard results.contains(result) else { throw .badRequest("\"result\" must be one of \(results.joined(separator: ", "))") }
        }
        var environment = StoreEnvironment.production
        if let text = try field(object, "environment", required: false) {
            guard let parsed = StoreEnvironment(rawValue: text) else {
                throw .badRequest("\"environment\" must be production or sandbox")
            }
            environment = parsed
        }
        return Report(type: type, placement: placement, eventId: eventId, offering: offering, result: result, environment: environment)
    }

    private static func field(_ object: JSONObject, _ key: String, required: Bool) throws(APIError) -> String? {
        guard let value = object[key], !value.isNull else {
            if required { throw .badRequest("\"\(key)\" is required") }
            return nil
        }
        guard let text = value.stringValue else { throw .badRequest("\"\(key)\" must be a string") }
        return text
    }

    /// Rows received before this are past the retention.
    static func retentionCutoff(now: Timestamp) -> Timestamp {
        now.adding(seconds: -SubscriptionStats.paywallRetentionDays * 86_400)
    }

    /// Deletes up to `limit` rows older than the retention; returns how many went.
    @discardableResult
    static func purge(now: Timestamp, limit: Int = purgeBatch, on db: DatabaseConnection) throws(DatabaseError) -> Int {
        let result = try db.execute(
            """
            DELETE FROM billing_paywall_events WHERE received_at < \(retentionCutoff(now: now)) ORDER BY received_at LIMIT \(limit)
            """)
        return Int(result.affectedRows)
    }

    /// `stats.purgePaywallEvents`: `purge` on an operator's behalf, audited like every admin
    /// mutation — one `audit_log` row with the cutoff, the limit and the number of rows
    /// deleted, in the transaction of the delete (no audit row, nothing deleted).
    static func purge(now: Timestamp, limit: Int, actor: String, on db: DatabaseConnection) throws -> Int {
        try db.transaction(retries: 3) { db -> Int in
            let removed = try purge(now: now, limit: limit, on: db)
            try AuditLog.write(
                actor: actor, action: "stats.purgePaywallEvents",
                detail: [
                    "cutoff": .string(retentionCutoff(now: now).iso8601), "limit": .int(Int64(limit)),
                    "deleted": .int(Int64(removed)),
                ],
                now: now, on: db)
            return removed
        }
    }

    /// When this process last purged: one instance per process, owned by the composition root.
    final class PurgeSchedule: Sendable {
        private let lastPurge = Mutex<Int64>(0)

        init() {}

        /// True (and the purge counted as done now) when this process has not purged for
        /// `purgeIntervalMilliseconds`.
        func isDue(now: Timestamp) -> Bool {
            lastPurge.withLock { last -> Bool in
                guard now.millisecondsSinceEpoch - last >= PaywallEvents.purgeIntervalMilliseconds else { return false }
                last = now.millisecondsSinceEpoch
                return true
            }
        }
    }

    /// The opportunistic purge after a request. Best effort: a failure only means the next
    /// due request tries again.
    static func purge(now: Timestamp, on db: DatabaseConnection, logger: Logger) {
        do {
            let removed = try purge(now: now, on: db)
            if removed > 0 { logger.info("paywall events purged", ["paywall.purged": .int(Int64(removed))]) }
        } catch {
            logger.warning("paywall purge failed", ["error.kind": .string("\(error.kind)")])
        }
    }
}
