import Foundation
import Testing

@testable import Core

/// `QuarantineReplayers.retry` runs a row's replay in one transaction with the row's
/// resolution and its audit row; ingestion's in-transaction variant refuses to run outside one.
@Suite struct QuarantineReplayTests {
    let now = Timestamp(millisecondsSinceEpoch: 1_780_000_000_000)

    func purchase(_ id: String, sub: String) -> StoreEvent {
        StoreEvent(
            provider: .revenuecat, providerEventId: id, rawType: "INITIAL_PURCHASE", kind: .purchase,
            intrinsicAt: now, subscriptionId: sub, productId: "app.plus.monthly", tier: .plus, periodType: "NORMAL",
            platform: "app_store", purchasedAt: now, expiresAt: Timestamp(millisecondsSinceEpoch: now.millisecondsSinceEpoch + 86_400_000),
            priceMilli: 4990, currency: "EUR")
    }

    /// A row of a provider the production registry has no replayer for (the tests register their own).
    func quarantine(provider: String, on db: DatabaseConnection) throws -> UInt64 {
        let payload = Array("{\"replay\": \"\(UUID().uuidString)\"}".utf8)
        return try db.execute(
            """
            INSERT INTO billing_quarantine (provider, reason, payload_sha256, payload, received_at, last_received_at)
            VALUES (\(provider), 'untrusted_chain', \(SHA256.hexHash(payload)), \(payload), \(now), \(now))
            """
        ).lastInsertID
    }

    func count(_ query: SQLQuery, on db: DatabaseConnection) throws -> Int64 {
        try #require(try db.queryOne(query)).int64("n")
    }

    struct Broken: Error {}

    func knownUser(on db: DatabaseConnection) throws -> String {
        let user = UUID().uuidString.lowercased()
        try UserDirectory.ensureKnown(user, source: .token, createdAt: now, now: now, on: db)
        return user
    }

    /// A RevenueCat replayer (production has none) that records the purchase `eventId` for
    /// `user` inside the retry's transaction, then lets `then` finish (or fail) the replay.
    func replayers(
        recording eventId: String, for user: String,
        then: @escaping @Sendable (EventIngestion.Outcome) throws -> QuarantineReplay
    ) -> QuarantineReplayers {
        let event = purchase(eventId, sub: "s-\(user)")
        var replayers = QuarantineReplayers()
        replayers.register(provider: "revenuecat") { _, now, db in
            try then(try EventIngestion.record(event, payload: ["id": .string(eventId)], subjectCandidates: [user], now: now, on: db))
        }
        return replayers
    }

    @Test func aReplayerThatFailsAfterIngestingLeavesNothingOfTheReplay() throws {
        try withMigratedDatabase { db in
            let user = try knownUser(on: db)
            let replayers = replayers(recording: "replay-broken", for: user) { _ in throw Broken() }
            let id = try quarantine(provider: "revenuecat", on: db)
            let results = try replayers.retry(ids: [id], limit: 1, actor: "ops@test", now: now, on: db)
            #expect(results.map { $0["outcome"]?.stringValue } == ["still_failing"])
            #expect(results.first?["reason"]?.stringValue == "replay_error")
            // The event the replayer recorded went with the failed transaction.
            #expect(try count("SELECT COUNT(*) AS n FROM billing_events WHERE provider_event_id = 'replay-broken'", on: db) == 0)
            #expect(try count("SELECT COUNT(*) AS n FROM billing_subscriptions WHERE user_id = \(user)", on: db) == 0)
            let row = try #require(try db.queryOne("SELECT reason, retry_count, resolved_at FROM billing_quarantine WHERE id = \(id)"))
            #expect(try row.string("reason") == "replay_error" && row.int64("retry_count") == 1 && row.optionalTimestamp("resolved_at") == nil)
            #expect(try count("SELECT COUNT(*) AS n FROM audit_log WHERE actor = 'ops@test' AND action = 'events.retryQuarantined'", on: db) == 1)
        }
    }

    @Test func aReplayerIngestsInsideTheRetryTransaction() throws {
        try withMigratedDatabase { db in
            let user = try knownUser(on: db)
            let replayers = replayers(recording: "replay-ok", for: user) { recorded in
                QuarantineReplay(.applied(eventId: try #require(recorded.eventId)))
            }
            let id = try quarantine(provider: "revenuecat", on: db)
            let results = try replayers.retry(ids: nil, limit: 100, actor: "ops@test", now: now, on: db)
            #expect(results.map { $0["outcome"]?.stringValue } == ["applied"])
            #expect(try count("SELECT COUNT(*) AS n FROM billing_events WHERE provider_event_id = 'replay-ok' AND user_id = \(user)", on: db) == 1)
            #expect(try count("SELECT COUNT(*) AS n FROM billing_quarantine WHERE id = \(id) AND resolution = 'applied'", on: db) == 1)
        }
    }

    @Test func ingestionRecordNeedsTheCallersTransaction() throws {
        try withMigratedDatabase { db in
            let event = purchase("outside", sub: "s-outside")
            #expect(throws: DatabaseError.self) {
                _ = try EventIngestion.record(event, payload: [:], subjectCandidates: [], now: now, on: db)
            }
            #expect(try count("SELECT COUNT(*) AS n FROM billing_events WHERE provider_event_id = 'outside'", on: db) == 0)
            // ... and inside one, the claim of an event stored waiting is left for after the commit.
            let outcome = try db.transaction { db in
                let outcome = try EventIngestion.record(event, payload: [:], subjectCandidates: [], now: now, on: db)
                #expect(db.afterCommitSteps.count == 1)
                return outcome
            }
            #expect(outcome.status == .unmatched && db.afterCommitSteps.isEmpty)
        }
    }
}
