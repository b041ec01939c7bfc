import Testing

@testable import Core

/// The refresh under the statement limit (`SubscriptionStates.deriveConfined`): a chunk one of
/// whose statements the limit stops is derived again one subscription at a time, to the same
/// stored state as a refresh the limit never stopped; a subscription that outgrows the limit
/// by itself stops the refresh with the timeout it is. The limit is made to bite by a trigger
/// that sleeps 40 ms per state row written under a 500 ms `max_statement_time`: a chunk's
/// multi-row INSERT of 32 rows takes at least 1,280 ms, one subscription's one or two rows 80
/// (room for a loaded machine).
@Suite struct StatsRefreshLimitTests {
    static let tables = [
        "billing_subscription_states", "billing_counted_events", "billing_counted_buckets", "billing_cohort_sums",
        "billing_cohort_paying", "billing_subscription_folds",
    ]

    /// Every row of the stored state, each table's rows as text, sorted.
    static func stored(on db: DatabaseConnection) throws -> [String: [String]] {
        var all: [String: [String]] = [:]
        for table in tables {
            all[table] = try db.query("SELECT * FROM \(unsafeRaw: table)").map { row in
                row.values.map { "\($0)" }.joined(separator: "|")
            }.sorted()
        }
        return all
    }

    static func slowStates(on db: DatabaseConnection) throws {
        try db.execute(
            """
            CREATE TRIGGER test_slow_states BEFORE INSERT ON billing_subscription_states
            FOR EACH ROW SET @test_slept = SLEEP(0.04)
            """)
        try db.execute("SET SESSION max_statement_time = 0.5")
    }

    static func purchases(_ count: Int, on db: DatabaseConnection) throws {
        for i in 0..<count {
            try StatsFixture.insert(
                .init(
                    kind: "purchase", sub: "limit-\(i)", price: 4_990, purchased: "2026-03-01T10:00:00Z", expires: "2026-04-01T10:00:00Z",
                    at: "2026-03-01T10:00:00Z", status: "unmatched"),
                id: "limit-\(i)", on: db)
        }
    }

    @Test func aChunkTheLimitStopsIsDerivedOneSubscriptionAtATime() throws {
        try withStatsDatabase { db in
            let now = Timestamp(iso8601: "2026-05-01T00:00:00Z")!
            try Self.purchases(40, on: db)
            try Self.slowStates(on: db)
            let done = try SubscriptionStates.refresh(on: db, now: now)
            #expect(done.confined == 1)
            #expect(done.subscriptions == 40)
            #expect(done.pending == 0)
            let confined = try Self.stored(on: db)
            #expect(confined["billing_subscription_states"]?.count ?? 0 >= 40)

            // The same subscriptions derived again whole, with no limit in the way.
            try db.execute("DROP TRIGGER test_slow_states")
            try db.execute("SET SESSION max_statement_time = 0")
            try db.execute(
                """
                INSERT INTO billing_subscription_changes (environment, subscription_id)
                SELECT DISTINCT environment, subscription_id FROM billing_events WHERE subscription_id IS NOT NULL
                """)
            let again = try SubscriptionStates.refresh(on: db, now: now)
            #expect(again.confined == 0)
            #expect(again.subscriptions == 40)
            #expect(try Self.stored(on: db) == confined)
        }
    }

    @Test func aSubscriptionThatOutgrowsTheLimitByItselfStopsTheRefreshAsATimeout() throws {
        try withStatsDatabase { db in
            try Self.purchases(3, on: db)
            // 20 monthly periods, each a state: its rows' first INSERT has 16 (640 ms of sleeps).
            for month in 0..<20 {
                let start = Timestamp(iso8601: "2025-01-05T10:00:00Z")!.adding(milliseconds: Int64(month) * 31 * 86_400_000)
                let end = start.adding(milliseconds: 31 * 86_400_000)
                try StatsFixture.insert(
                    .init(
                        kind: month == 0 ? "purchase" : "renewal", sub: "limit-long", price: 4_990, purchased: start.iso8601,
                        expires: end.iso8601, at: start.iso8601, status: "unmatched"),
                    id: "limit-long-\(month)", on: db)
            }
            let notes = try db.queryOne("SELECT COUNT(*) AS n FROM billing_subscription_changes")?.int64("n")
            try Self.slowStates(on: db)
            do {
                try SubscriptionStates.refresh(on: db, now: Timestamp(iso8601: "2026-05-01T00:00:00Z")!)
                Issue.record("the refresh went through a subscription that outgrows the limit by itself")
            } catch let error as DatabaseError {
                #expect(error.isStatementTimeout, "\(error)")
            }
            // Nothing of it was kept: its notes wait for a refresh the limit lets through.
            #expect(try db.queryOne("SELECT COUNT(*) AS n FROM billing_subscription_changes")?.int64("n") == notes)
            #expect(try db.queryOne("SELECT COUNT(*) AS n FROM billing_subscription_states")?.int64("n") == 0)
        }
    }
}
