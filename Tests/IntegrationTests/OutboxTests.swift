import Foundation
import Testing

@testable import Core

/// The outbox's rule (SPEC §16) against the real database: every change of a user's access
/// is one `access.changed` row, committed with it, numbered in revision order, carrying the
/// access as of that revision; every applied event one `event.applied` row before it; a
/// delivery that changes nothing writes nothing. Checked for every arrival order of one
/// user's events (in order, reversed, shuffled, concurrent on several connections) and for
/// the operator's changes (grants, campaigns).
@Suite struct OutboxTests {
    static let hour: Int64 = 3_600_000
    static let base = Timestamp(millisecondsSinceEpoch: 1_780_000_000_000)

    static func renewal(_ n: Int, user: String, sub: String) -> StoreEvent {
        StoreEvent(
            provider: .revenuecat, providerEventId: "outbox-\(user)-\(n)", rawType: n == 0 ? "INITIAL_PURCHASE" : "RENEWAL",
            kind: n == 0 ? .purchase : .renewal, intrinsicAt: base.adding(milliseconds: Int64(n) * 720 * hour), subscriptionId: sub,
            productId: "app.plus.monthly", tier: .plus, environment: .production, platform: "app_store",
            purchasedAt: base.adding(milliseconds: Int64(n) * 720 * hour),
            expiresAt: base.adding(milliseconds: Int64(n + 1) * 720 * hour), priceMilli: 4990, currency: "EUR")
    }

    struct Row: Equatable {
        var type: String
        var revision: UInt64
        var data: JSON
    }

    static func rows(_ user: String, on db: DatabaseConnection) throws -> [Row] {
        try db.query("SELECT type, revision, data FROM billing_outbox WHERE user_id = \(user) ORDER BY id").map { row in
            Row(type: try row.string("type"), revision: try row.uint64("revision"), data: try JSON.parse(try row.string("data")))
        }
    }

    /// The rule, whatever happened: access.changed revisions are 1...final, each once, in id
    /// order; the last carries the committed access; event.applied rows are the applied events.
    static func expectTheRule(_ user: String, now: Timestamp, on db: DatabaseConnection) throws {
        let rows = try rows(user, on: db)
        let changes = rows.filter { $0.type == "access.changed" }
        let revision = try #require(try db.queryOne("SELECT revision FROM billing_access WHERE user_id = \(user)")).uint64("revision")
        #expect(changes.map(\.revision) == Array(1...revision), "\(changes.map(\.revision))")
        #expect(changes.allSatisfy { $0.data["revision"]?.int64Value == Int64($0.revision) })
        let committed = try #require(try AccessRecord.load(userId: user, now: now, on: db))
        #expect(changes.last?.data == AccessSnapshot(record: committed, now: now, cadence: { _ in nil }).changeData)
        let applied = try #require(try db.queryOne("SELECT COUNT(*) AS n FROM billing_events WHERE user_id = \(user) AND status = 'applied'"))
        #expect(rows.filter { $0.type == "event.applied" }.count == (try applied.int("n")))
        // Each event.applied comes before the access.changed of its transaction.
        for (index, row) in rows.enumerated() where row.type == "event.applied" {
            let next = rows[(index + 1)...].first { $0.type == "access.changed" }
            if let next { #expect(next.revision >= row.revision) }
        }
    }

    @Test(arguments: ["in order", "reversed", "shuffled", "duplicated"])
    func oneUsersEventsInAnyOrderAreOneRowPerChangeInRevisionOrder(order: String) throws {
        try withMigratedDatabase { db in
            let user = UUID().uuidString.lowercased()
            let now = Self.base.adding(milliseconds: 3 * 720 * Self.hour)
            try UserDirectory.ensureKnown(user, source: .token, createdAt: Self.base, now: Self.base, on: db)
            var events = (0..<8).map { Self.renewal($0, user: user, sub: "sub-\(user)") }
            switch order {
            case "reversed": events.reverse()
            case "shuffled": events.shuffle()
            case "duplicated": events += events
            default: break
            }
            for event in events {
                _ = try EventIngestion.ingest(event, payload: ["id": .string(event.providerEventId)], subjectCandidates: [user], now: now, on: db)
            }
            try Self.expectTheRule(user, now: now, on: db)
            if order == "duplicated" {
                #expect(try Self.rows(user, on: db).filter { $0.type == "event.applied" }.count == 8, "a duplicate is told nothing")
            }
        }
    }

    @Test func concurrentDeliveriesForOneUserAreOneRowPerChangeInRevisionOrder() throws {
        try withTestDatabase { configuration, _ in
            let setup = DatabaseConnection(configuration: configuration)
            try migrateTestDatabase(setup)
            let user = UUID().uuidString.lowercased()
            let now = Self.base.adding(milliseconds: 20 * 720 * Self.hour)
            try UserDirectory.ensureKnown(user, source: .token, createdAt: Self.base, now: Self.base, on: setup)
            let events = (0..<24).map { Self.renewal($0, user: user, sub: "sub-\(user)") }.shuffled()
            let waits = (0..<6).map { worker in
                onThread { () throws -> Int in
                    let db = DatabaseConnection(configuration: configuration)
                    for event in events.enumerated().filter({ $0.offset % 6 == worker }).map(\.element) {
                        _ = try EventIngestion.ingest(
                            event, payload: ["id": .string(event.providerEventId)], subjectCandidates: [user], now: now, on: db)
                    }
                    return worker
                }
            }
            for wait in waits { _ = try wait() }
            try Self.expectTheRule(user, now: now, on: setup)
        }
    }

    @Test func aTransactionChangingThousandsOfUsersTellsEachOnce() throws {
        try withMigratedDatabase { db in
            let users = (0..<1_100).map { "bulk-\($0)-" + UUID().uuidString.lowercased() }
            for user in users { _ = try UserDirectory.ensureKnown(user, source: .token, createdAt: Self.base, now: Self.base, on: db) }
            // As a campaign's revocation does: every member's revision moves in one transaction.
            try db.transaction { db in
                for user in users {
                    try GrantStore.bumpRevision(userId: user, now: Self.base, on: db)
                    try AccessOutbox.accessChanged(user, now: Self.base, on: db)
                }
            }
            let counted = try #require(try db.queryOne("SELECT COUNT(*) AS n, COUNT(DISTINCT user_id) AS users FROM billing_outbox"))
            #expect(try counted.int("n") == users.count && (try counted.int("users")) == users.count)
        }
    }

    @Test func grantsAndCampaignsAreChangesTooAndARolledBackOneIsNone() throws {
        try withMigratedDatabase { db in
            let user = UUID().uuidString.lowercased()
            let now = Self.base
            try UserDirectory.ensureKnown(user, source: .token, createdAt: now, now: now, on: db)
            try db.transaction { db in try GrantStore.bumpRevision(userId: user, now: now, on: db) }
            #expect(throws: DatabaseError.self) {
                try db.transaction { db in
                    try GrantStore.bumpRevision(userId: user, now: now, on: db)
                    throw DatabaseError.misuse("rolled back")
                }
            }
            try db.transaction { db in
                // Twice in one transaction: one change, told once, at its committed revision.
                try GrantStore.bumpRevision(userId: user, now: now, on: db)
                try GrantStore.bumpRevision(userId: user, now: now, on: db)
            }
            #expect(try Self.rows(user, on: db).map(\.revision) == [1, 3])
        }
    }

    /// The fan-out skips an outbox row another transaction holds (another dispatcher's pass,
    /// the live publisher marking it published): then every later row of that user waits
    /// with it, whichever of his rows is held, or his deliveries would be made, and sent,
    /// out of revision order. Another user's rows go on.
    @Test(arguments: [0, 1, 2])
    func aRowHeldElsewhereHoldsBackItsUsersLaterRowsOnly(held: Int) throws {
        try withTestDatabase { configuration, _ in
            let db = DatabaseConnection(configuration: configuration)
            try migrateTestDatabase(db)
            let now = Self.base
            let (user, other) = (UUID().uuidString.lowercased(), UUID().uuidString.lowercased())
            for u in [user, other] { try UserDirectory.ensureKnown(u, source: .token, createdAt: now, now: now, on: db) }
            for u in [user, user, other, user] {
                try db.transaction { db in try GrantStore.bumpRevision(userId: u, now: now, on: db) }
            }
            let ids = try db.query("SELECT id FROM billing_outbox WHERE user_id = \(user) ORDER BY id").map { try $0.uint64("id") }
            #expect(ids.count == 3)
            let endpoint = BillingConfiguration.Webhooks.Endpoint(
                id: "crm", url: "https://crm.example/hooks", secret: "s", events: ["access.changed"])
            func delivered(_ u: String) throws -> [UInt64] {
                try db.query("SELECT outbox_id FROM billing_webhook_deliveries WHERE user_id = \(u) ORDER BY outbox_id").map {
                    try $0.uint64("outbox_id")
                }
            }
            let holder = DatabaseConnection(configuration: configuration)
            try holder.transaction { holder in
                _ = try holder.query("SELECT id FROM billing_outbox WHERE id = \(ids[held]) FOR UPDATE")
                _ = try WebhookDeliveries.fanOut(endpoints: [endpoint], limit: 200, now: now, on: db)
            }
            #expect(try delivered(user) == Array(ids[..<held]), "his rows before the held one only")
            #expect(try delivered(other).count == 1, "another user's row goes on")
            _ = try WebhookDeliveries.fanOut(endpoints: [endpoint], limit: 200, now: now, on: db)
            #expect(try delivered(user) == ids)
            // Sent one at a time, in revision order.
            var sent: [UInt64] = []
            while let due = try WebhookDeliveries.due(endpointId: "crm", limit: 10, now: now, on: db).first(where: { ids.contains($0.outboxId) }) {
                sent.append(due.outboxId)
                try WebhookDeliveries.record(.delivered(status: 200), of: due, now: now, on: db)
            }
            #expect(sent == ids)
        }
    }

    /// `outbox.enabled` false: the same deliveries and grants change the access as before and
    /// write no outbox row.
    @Test func anInstallationThatAnnouncesNothingWritesNoRow() throws {
        try withTestDatabase { configuration, _ in
            var quiet = configuration
            quiet.writesOutbox = false
            let db = DatabaseConnection(configuration: quiet)
            try migrateTestDatabase(db)
            let user = UUID().uuidString.lowercased()
            let now = Self.base.adding(milliseconds: 2 * 720 * Self.hour + Self.hour)
            try UserDirectory.ensureKnown(user, source: .token, createdAt: Self.base, now: Self.base, on: db)
            for event in (0..<3).map({ Self.renewal($0, user: user, sub: "sub-\(user)") }) {
                _ = try EventIngestion.ingest(event, payload: ["id": .string(event.providerEventId)], subjectCandidates: [user], now: now, on: db)
            }
            try db.transaction { db in try GrantStore.bumpRevision(userId: user, now: now, on: db) }
            let access = try #require(try db.queryOne("SELECT revision, tier FROM billing_access WHERE user_id = \(user)"))
            #expect(try access.uint64("revision") == 4, "three changes of the subscription and a grant's")
            #expect(try access.string("tier") == "plus")
            #expect(try Self.rows(user, on: db).isEmpty)
        }
    }

    /// The live publisher with nginx unreachable: a row older than nchan keeps messages is
    /// passed over (marked, no message id), the first publish fails and stops the batch, and
    /// it and every row after it stay queued, unmarked, for the next pass.
    @Test func aPublisherThatCannotReachNginxMarksNothingItDidNotPublish() throws {
        try withTestDatabase { configuration, _ in
            let db = DatabaseConnection(configuration: configuration)
            try migrateTestDatabase(db)
            let now = Self.base
            let user = try Self.userChanged(at: [now.adding(seconds: -(LiveChannel.keepsSeconds + 60)), now, now], on: db)
            let publisher = LivePublisher(
                socket: LivePublisherSocket(path: "/nonexistent/fcgibilling-test/nchan.sock"), clock: FixedClock(now),
                logger: Logger(sink: try LogSink(path: nil, minimumLevel: .critical)),
                makeConnection: { DatabaseConnection(configuration: configuration) })
            #expect(throws: HTTPClientError.self) { try publisher.publishPending(session: CurlHTTPClient.Session(), on: db) }
            let marks = try db.query(
                "SELECT published_at IS NOT NULL AS marked, live_message_id FROM billing_outbox WHERE user_id = \(user) ORDER BY id"
            ).map { (try $0.bool("marked"), try $0.optionalString("live_message_id")) }
            #expect(marks.map(\.0) == [true, false, false], "the old row passed over; the others queued")
            #expect(marks.allSatisfy { $0.1 == nil })
            #expect(try LivePublisher.pending(limit: 10, on: db).count == 2)
        }
    }

    /// The publisher marks a batch in one statement: each row under its own message id (nil:
    /// passed over), whatever the batch's size (padded to a power of two with its last row),
    /// and no row outside it.
    @Test(arguments: [1, 3, 4, 5])
    func aPublishedBatchIsMarkedRowByRow(size: Int) throws {
        try withTestDatabase { configuration, _ in
            let db = DatabaseConnection(configuration: configuration)
            try migrateTestDatabase(db)
            let now = Self.base
            let user = try Self.userChanged(at: Array(repeating: now, count: size + 1), on: db)
            let ids = try db.query("SELECT id FROM billing_outbox WHERE user_id = \(user) ORDER BY id").map { try $0.uint64("id") }
            #expect(ids.count == size + 1)
            let batch = ids.prefix(size).enumerated().map { offset, id in (id, offset % 2 == 1 ? nil : "\(1_796_307_148 + offset):0") }
            try LivePublisher.markPublished(Array(batch), now: now, on: db)
            let marks = try db.query(
                "SELECT id, published_at IS NOT NULL AS marked, live_message_id FROM billing_outbox WHERE user_id = \(user) ORDER BY id"
            ).map { (try $0.uint64("id"), try $0.bool("marked"), try $0.optionalString("live_message_id")) }
            #expect(marks.map(\.0) == ids)
            #expect(marks.map(\.1) == Array(repeating: true, count: size) + [false], "the batch marked, the row after it queued")
            #expect(marks.map(\.2) == batch.map(\.1) + [nil])
        }
    }

    /// A new user whose access changed once at each of `instants` (an `access.changed` row each).
    private static func userChanged(at instants: [Timestamp], on db: DatabaseConnection) throws -> String {
        let user = UUID().uuidString.lowercased()
        try UserDirectory.ensureKnown(user, source: .token, createdAt: base, now: base, on: db)
        for at in instants {
            try db.transaction { db in try GrantStore.bumpRevision(userId: user, now: at, on: db) }
        }
        return user
    }
}
