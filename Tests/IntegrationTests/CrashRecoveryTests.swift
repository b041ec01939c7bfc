import Testing

@testable import Core

/// Found by scripts/torture (long profile, kill -9 of workers during the storm): a user's
/// creation and the claim of his unmatched events are two transactions, and a process that
/// dies between them left the user known with his store events unmatched for good (his
/// snapshot said free while the serial replay said pro). These tests stop "between the two"
/// by running only the first part, as a killed worker would have.
@Suite struct CrashRecoveryTests {
    static let now = Timestamp(CivilDateTime(year: 2026, month: 3, day: 1))
    let services: BillingServices
    let user = "0c0ffee0-8a4e-4f37-9a44-\(String(UInt64.random(in: 0...0xffff_ffff_ffff), radix: 16).leftPadded(12))"

    init() throws { services = try BillingServices(configuration: BillingConfiguration()) }

    func purchase(_ id: String, on db: DatabaseConnection) throws -> EventIngestion.Outcome {
        let day: Int64 = 86_400_000
        let at = Self.now.millisecondsSinceEpoch - day
        let delivery = try RevenueCatDelivery.decode(
            [
                "event": [
                    "id": .string(id), "type": "INITIAL_PURCHASE", "app_user_id": .string(user), "product_id": "app.pro.monthly",
                    "entitlement_ids": ["pro"], "original_transaction_id": .string("otx-\(user)"), "purchased_at_ms": .int(at),
                    "expiration_at_ms": .int(at + 30 * day), "event_timestamp_ms": .int(at), "environment": "PRODUCTION",
                ]
            ], tiers: services.tiers, idPattern: services.idPattern)
        return try EventIngestion.ingest(
            delivery.event, payload: delivery.payload, subjectCandidates: delivery.userCandidates,
            now: Self.now, on: db)
    }

    /// The first of ensureKnown's two transactions, alone.
    func createdButNotClaimed(on db: DatabaseConnection) throws {
        try db.transaction { db in
            try db.execute(
                """
                INSERT INTO billing_users (id, created_at, first_seen_at, last_seen_at, source)
                VALUES (\(user), \(Self.now), \(Self.now), \(Self.now), 'token')
                """)
            try db.execute("INSERT INTO billing_access (user_id, revision, updated_at) VALUES (\(user), 0, \(Self.now))")
        }
    }

    func snapshot(on db: DatabaseConnection) throws -> AccessSnapshot? {
        try AccessSnapshot.load(userId: user, now: Self.now, cadence: { _ in nil }, on: db)
    }

    @Test func aSnapshotOfACreatedButUnclaimedUserSaysSoAndTheClaimRepairsIt() throws {
        try withMigratedDatabase { db in
            #expect(try purchase("crash-1-\(user)", on: db).status == .unmatched)
            try createdButNotClaimed(on: db)
            let before = try #require(try snapshot(on: db))
            #expect(before.unclaimed && before.tier == .free)
            // What AccessRoute now does for an unclaimed snapshot.
            try UserDirectory.ensureKnown(user, source: .token, createdAt: Self.now, now: Self.now, on: db)
            let after = try #require(try snapshot(on: db))
            #expect(!after.unclaimed && after.tier == .pro)
        }
    }

    @Test func aUserWithNothingWaitingIsMarkedClaimed() throws {
        try withMigratedDatabase { db in
            try UserDirectory.ensureKnown(user, source: .token, createdAt: Self.now, now: Self.now, on: db)
            #expect(try snapshot(on: db)?.unclaimed == false, "else every read would run the claim again")
        }
    }

    @Test func theProvidersRetryOfAStillUnmatchedEventClaimsIt() throws {
        try withMigratedDatabase { db in
            let id = "crash-2-\(user)"
            #expect(try purchase(id, on: db).status == .unmatched)
            try createdButNotClaimed(on: db)
            // The first delivery's answer was lost with its process: the retry is a duplicate,
            // and it finishes the claim.
            #expect(try purchase(id, on: db).duplicate)
            let status = try db.queryOne("SELECT status FROM billing_events WHERE provider_event_id = \(id)")?.string("status")
            #expect(status == "applied")
            #expect(try snapshot(on: db)?.tier == .pro)
        }
    }
}
