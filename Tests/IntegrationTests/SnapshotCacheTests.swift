import Foundation
import Testing

@testable import Core

/// The snapshot cache against the real MariaDB: migration 009's triggers change a user's
/// `snapshot_version` with every input of his snapshot, whoever writes it, and the access
/// route answers from its cache exactly what a full read answers, step after step, while
/// grants, campaigns, usage, store events, hand edits and the clock move.
@Suite struct SnapshotCacheTests {
    static let t0 = Timestamp(CivilDateTime(year: 2026, month: 2, day: 2))
    static func hour(_ n: Double) -> Timestamp { t0.adding(milliseconds: Int64(n * 3_600_000)) }
    static let user = "5a0c0f3e-1b2c-4d5e-8f90-a1b2c3d4e5f6"

    static func version(_ db: DatabaseConnection, _ user: String = user) throws -> UInt64 {
        try db.queryOne("SELECT snapshot_version FROM billing_access WHERE user_id = \(user)")!.uint64("snapshot_version")
    }

    static func revenueCat(
        _ type: String, id: String, at: Timestamp, expires: Timestamp, product: String = "app.plus.monthly",
        services: BillingServices, on db: DatabaseConnection
    ) throws {
        let event: JSONObject = [
            "id": .string(id), "type": .string(type), "app_user_id": .string(user), "product_id": .string(product),
            "entitlement_ids": [.string(product.contains("pro") ? "pro" : "plus")], "period_type": "NORMAL",
            "original_transaction_id": "otx-cache", "purchased_at_ms": .int(at.millisecondsSinceEpoch),
            "expiration_at_ms": .int(expires.millisecondsSinceEpoch), "event_timestamp_ms": .int(at.millisecondsSinceEpoch),
            "environment": "PRODUCTION",
        ]
        let delivery = try RevenueCatDelivery.decode(["event": .object(event)], tiers: services.tiers, idPattern: services.idPattern)
        _ = try EventIngestion.ingest(
            delivery.event, payload: delivery.payload, subjectCandidates: delivery.userCandidates,
            now: at, on: db)
    }

    @Test func everyInputOfTheSnapshotChangesTheVersionAndNothingElseDoes() throws {
        try withMigratedDatabase { db in
            let services = try BillingServices(configuration: BillingConfiguration())
            try UserDirectory.ensureKnown(Self.user, source: .import, createdAt: Self.t0, now: Self.t0, on: db)
            var seen: [UInt64] = [try Self.version(db)]
            func changed(_ what: String, _ body: () throws -> Void) throws {
                try body()
                let now = try Self.version(db)
                #expect(!seen.contains(now), "\(what) must change snapshot_version")
                seen.append(now)
            }
            try changed("a store event") {
                try Self.revenueCat("INITIAL_PURCHASE", id: "e1", at: Self.hour(1), expires: Self.hour(700), services: services, on: db)
            }
            var grantId: UInt64 = 0
            try changed("a grant") {
                grantId = try GrantStore.create(
                    GrantRequest(
                        userId: Self.user, tier: .pro, startsAt: nil, expiresAt: Self.hour(48),
                        reason: "test", campaign: nil, idempotencyKey: "g1"),
                    actor: "t", now: Self.hour(2), on: db
                ).grant.id
            }
            try changed("a grant revoked") {
                _ = try GrantStore.revoke(grantId: grantId, actor: "t", reason: "done", now: Self.hour(3), on: db)
            }
            let early = Grandfather.Definition(campaign: "early", tier: .pro, expiresAt: nil, reason: "test")
            try changed("a campaign membership") {
                _ = try Grandfather.applyUsers(early, userIds: [Self.user], actor: "t", now: Self.hour(4), on: db)
            }
            try changed("its campaign revoked") {
                _ = try Grandfather.revoke(campaign: "early", actor: "t", reason: nil, now: Self.hour(5), on: db)
            }
            try changed("a consumption") {
                _ = try QuotaService.consume(
                    userId: Self.user, meter: "recurringGeneration", amount: 1, idempotencyKey: "u1",
                    now: Self.hour(6), services: services, on: db)
            }
            // What a DBA may do by hand, bypassing the code entirely.
            try changed("a subscription edited by hand") {
                try db.execute("UPDATE billing_subscriptions SET expires_at = \(Self.hour(10)) WHERE user_id = \(Self.user)")
            }
            try changed("a grant inserted by hand") {
                try db.execute(
                    """
                    INSERT INTO billing_grants (user_id, tier, starts_at, reason, idempotency_key, params_sha256, granted_by, created_at)
                    VALUES (\(Self.user), 'plus', \(Self.hour(7)), 'by hand', 'hand-1', REPEAT('0', 64), 'dba', \(Self.hour(7)))
                    """)
            }
            try changed("a usage entry inserted by hand") {
                try db.execute(
                    """
                    INSERT INTO usage_ledger (user_id, meter, amount, idempotency_key, created_at, plan_version, plan_tier,
                      window_start, window_end, limit_at_consumption, over_limit, response)
                    VALUES (\(Self.user), 'recurringGeneration', 1, 'hand-1', \(Self.hour(7)), 1, 'plus', \(Self.t0),
                      \(Self.hour(168)), 2, 0, '{}')
                    """)
            }
            try changed("a grant deleted by hand") {
                try db.execute("DELETE FROM billing_grants WHERE user_id = \(Self.user)")
            }
            try changed("the sign-up instant edited by hand") {
                try db.execute("UPDATE billing_users SET created_at = \(Self.hour(-24)) WHERE id = \(Self.user)")
            }
            try changed("a membership deleted by hand") {
                try db.execute("DELETE FROM billing_campaign_members WHERE user_id = \(Self.user)")
            }
            // The daily activity record is not an input of the snapshot.
            let before = try Self.version(db)
            try UserActivity.record(Self.user, now: Self.hour(30), on: db)
            #expect(try Self.version(db) == before)
            // Another user's changes leave this one's version alone.
            let other = "5a0c0f3e-1b2c-4d5e-8f90-000000000002"
            try UserDirectory.ensureKnown(other, source: .import, createdAt: Self.t0, now: Self.t0, on: db)
            _ = try GrantStore.create(
                GrantRequest(
                    userId: other, tier: .plus, startsAt: nil, expiresAt: nil, reason: "x",
                    campaign: nil, idempotencyKey: "g2"), actor: "t", now: Self.hour(31), on: db)
            #expect(try Self.version(db) == before)
        }
    }

    /// A worker with the cache and one without, each with its own connection, answer the
    /// same request at the same instant after every step; the cache must never show
    /// anything a full read would not.
    @Test func cachedAnswersEqualFullReadsWhateverChanges() throws {
        try withTestDatabase { configuration, _ in
            let setup = DatabaseConnection(configuration: configuration)
            try migrateTestDatabase(setup)
            let key = try PrivateKey.generateEC()
            let keysFile = FileManager.default.temporaryDirectory.appendingPathComponent("snapshot-cache-keys-\(UUID()).json").path
            defer { try? FileManager.default.removeItem(atPath: keysFile) }
            try Data(JSON.object(["k1": .string(try key.publicKeyPEM())]).serialized()).write(to: URL(fileURLWithPath: keysFile))
            func services(cache: Int) throws -> BillingServices {
                var config = BillingConfiguration()
                config.auth.keysFile = keysFile
                config.auth.issuer = "https://issuer.test"
                config.auth.audience = "billing-app"
                config.server.snapshotCacheUsers = cache
                return try BillingServices(configuration: config)
            }
            let clock = MutableClock(Self.hour(0))
            let cachedServices = try services(cache: 100)
            let freshServices = try services(cache: 0)
            let cached = BillingRequestContext(
                clock: clock, services: cachedServices, database: DatabaseConnection(configuration: configuration))
            let fresh = BillingRequestContext(
                clock: clock, services: freshServices, database: DatabaseConnection(configuration: configuration))
            let token = try CompactJWS.sign(
                payload: [
                    "sub": .string(Self.user), "iss": "https://issuer.test", "aud": "billing-app",
                    "exp": .int(Self.hour(24 * 30).millisecondsSinceEpoch / 1000), "iat": .int(Self.hour(0).millisecondsSinceEpoch / 1000),
                ],
                header: ["kid": "k1"], key: key, algorithm: "ES256")
            let request = HTTPRequest(method: .get, path: "/api/v1/billing/access", headers: ["Authorization": "Bearer \(token)"])
            let hitsBefore = cachedServices.metrics.snapshotCacheHits.current
            var step = 0
            func same(_ what: String) throws {
                step += 1
                let a = try AccessRoute(cachedServices).handle(request, cached)
                let b = try AccessRoute(freshServices).handle(request, fresh)
                #expect(a.status == .ok && b.status == .ok, "\(what)")
                #expect(try JSON.parse(a.body) == JSON.parse(b.body), "step \(step): \(what)")
                // Served twice more: both must still agree (the second is a cache hit).
                #expect(
                    try JSON.parse(AccessRoute(cachedServices).handle(request, cached).body) == JSON.parse(b.body), "step \(step) again: \(what)")
            }
            let services = try services(cache: 0)
            try same("first request: the user becomes known")
            try Self.revenueCat("INITIAL_PURCHASE", id: "c1", at: Self.hour(1), expires: Self.hour(100), services: services, on: setup)
            try same("a purchase")
            clock.instant = Self.hour(2)
            _ = try GrantStore.create(
                GrantRequest(
                    userId: Self.user, tier: .pro, startsAt: Self.hour(5), expiresAt: Self.hour(8),
                    reason: "later", campaign: nil, idempotencyKey: "g1"), actor: "t", now: Self.hour(2), on: setup)
            try same("a grant that starts later")
            clock.instant = Self.hour(6)
            try same("the grant started (nothing written)")
            clock.instant = Self.hour(9)
            try same("the grant ended (nothing written)")
            _ = try QuotaService.consume(
                userId: Self.user, meter: "recurringGeneration", amount: 1, idempotencyKey: "k1",
                now: Self.hour(9), services: services, on: setup)
            try same("a consumption")
            _ = try Grandfather.applyUsers(
                .init(campaign: "vip", tier: .pro, expiresAt: nil, reason: "r"), userIds: [Self.user],
                actor: "t", now: Self.hour(9), on: setup)
            try same("a campaign")
            _ = try Grandfather.revoke(campaign: "vip", actor: "t", reason: nil, now: Self.hour(10), on: setup)
            try same("the campaign revoked")
            try setup.execute("UPDATE billing_subscriptions SET expires_at = \(Self.hour(11)) WHERE user_id = \(Self.user)")
            try same("the subscription cut short by hand")
            clock.instant = Self.hour(12)
            try same("the subscription expired at read time")
            try Self.revenueCat(
                "RENEWAL", id: "c2", at: Self.hour(12), expires: Self.hour(24 * 7 + 12), product: "app.pro.monthly",
                services: services, on: setup)
            try same("a renewal into Pro")
            clock.instant = Self.hour(24 * 7 + 1)
            try same("a new quota window (nothing written)")
            clock.instant = Self.hour(3)
            try same("a clock reading before the cached load")
            #expect(cachedServices.metrics.snapshotCacheHits.current > hitsBefore, "the cache served some of these")
        }
    }
}

/// A clock the test moves by hand (the route reads it once per request).
final class MutableClock: BillingClock, @unchecked Sendable {
    var instant: Timestamp
    init(_ instant: Timestamp) { self.instant = instant }
    func now() -> Timestamp { instant }
}
