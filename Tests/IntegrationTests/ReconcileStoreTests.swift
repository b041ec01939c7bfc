import Testing

@testable import Core

/// Reconciliation's SQL on the real MariaDB: what a recorded pull writes (keys, folding,
/// the same state twice, a state coming back), and the schedule (candidates, claim,
/// failure backoff, success). The pulls are built from payloads directly: their
/// verification is the verifier's (AppleVerifierTests) and the network's the e2e layer's.
@Suite struct ReconcileStoreTests {
    static let day: Int64 = 86_400_000
    let now = Timestamp(millisecondsSinceEpoch: 1_780_000_000_000)
    let pattern = UserIdPattern(BillingConfiguration.Users.uuidPattern)!
    let catalog: AppleDelivery.Catalog = ["com.example.plus.monthly": .init(tier: .plus, cadence: .monthly)]

    func reconciler() throws -> Reconciler {
        let token = try AppStoreServerAPIToken(
            issuerId: "i", keyId: "k", bundleId: "com.example.fcgibilling",
            privateKeyPEM: try PrivateKey.generateEC().pem(), lifetimeSeconds: 600)
        let client = ProviderAPIClient(
            http: CurlHTTPClient(timeoutMilliseconds: 1000, connectTimeoutMilliseconds: 1000, caFile: nil),
            maxAttempts: 1, maxRetryAfterSeconds: 0, errorCodeMember: "errorCode")
        let api = AppStoreServerAPI(
            token: token, client: client, productionURL: "https://127.0.0.1:9/p",
            sandboxURL: "https://127.0.0.1:9/s")
        let verifier = AppleSignedDataVerifier(
            rootCertificates: [], bundleId: "com.example.fcgibilling", appAppleId: nil,
            environments: ["Production", "Sandbox"])
        return Reconciler(api: api, verifier: verifier, catalog: catalog, idPattern: pattern, policy: .deny)
    }

    func transaction(_ id: String, original: String, start: Int64, end: Int64, _ extra: JSONObject = [:]) -> JSON {
        var t: JSONObject = [
            "transactionId": .string(id), "originalTransactionId": .string(original),
            "productId": "com.example.plus.monthly", "environment": "Production",
            "purchaseDate": .int(now.millisecondsSinceEpoch + start), "expiresDate": .int(now.millisecondsSinceEpoch + end),
            "signedDate": .int(now.millisecondsSinceEpoch),
        ]
        for (k, v) in extra { t[k] = v }
        return .object(t)
    }

    func renewal(_ original: String, autoRenew: Int64, signed: Int64) -> JSON {
        [
            "originalTransactionId": .string(original), "autoRenewProductId": "com.example.plus.monthly", "autoRenewStatus": .int(autoRenew),
            "isInBillingRetryPeriod": false, "signedDate": .int(now.millisecondsSinceEpoch + signed), "environment": "Production",
        ]
    }

    /// A known user owning `original`, whose first period (30 days) ended two hours ago.
    func lapsed(_ db: DatabaseConnection, original: String) throws -> String {
        let user = "6f1c1a8e-8a4e-4f37-9a44-\(original.suffix(12))"
        _ = try UserDirectory.ensureKnown(user, source: .token, createdAt: now, now: now, on: db)
        _ = try AppleBinding.bind(
            subscriptionId: original, userId: user, restore: false, policy: .deny, transactionId: original,
            environment: .production, now: now, on: db)
        let first = try AppleDelivery.pulledTransaction(
            transaction(
                original, original: original, start: -30 * Self.day - 7_200_000,
                end: -7_200_000), catalog: catalog, idPattern: pattern)
        _ = try AppleIngestion.ingest(first, policy: .deny, now: now, on: db)
        return user
    }

    func record(_ r: Reconciler, _ pull: Reconciler.Pull, _ original: String, _ db: DatabaseConnection) throws -> Reconciler.Outcome {
        try db.transaction(retries: 3, isolation: .readCommitted) { db in
            try r.record(pull, subscriptionId: original, now: now, on: db)
        }
    }

    @Test func aPulledRenewalCorrectsOnceAndTheSameStateTwiceIsNothing() throws {
        try withMigratedDatabase { db in
            let r = try reconciler()
            let original = "200000000000001"
            let user = try lapsed(db, original: original)
            let renewed = transaction("200000000000002", original: original, start: -7_200_000, end: 30 * Self.day - 7_200_000)
            let pull = Reconciler.Pull(
                environment: .production,
                statuses: [(1, renewed, renewal(original, autoRenew: 1, signed: 0))],
                history: [
                    transaction(original, original: original, start: -30 * Self.day - 7_200_000, end: -7_200_000),
                    renewed,
                ])
            let first = try record(r, pull, original, db)
            #expect(first.changed)
            #expect(first.userId == user)
            #expect(first.eventsAdded == 2, "the renewal and the status; the first period is already there")
            #expect(first.after?.expiresAt == now.adding(milliseconds: 30 * Self.day - 7_200_000))
            #expect(first.after?.phase == .active)

            let again = try record(r, pull, original, db)
            #expect(!again.changed)
            #expect(again.eventsAdded == 0)
            let rows = try db.queryOne("SELECT COUNT(*) AS n FROM billing_events WHERE subscription_id = \(original)")?.int64("n")
            #expect(rows == 3)
        }
    }

    @Test func aStateThatComesBackAfterAnotherIsNews() throws {
        try withMigratedDatabase { db in
            let r = try reconciler()
            let original = "200000000000011"
            _ = try lapsed(db, original: original)
            let current = transaction("200000000000012", original: original, start: -7_200_000, end: 30 * Self.day)
            func pull(_ autoRenew: Int64, _ signed: Int64) -> Reconciler.Pull {
                Reconciler.Pull(
                    environment: .production, statuses: [(1, current, renewal(original, autoRenew: autoRenew, signed: signed))],
                    history: [])
            }
            #expect(try record(r, pull(1, 1000), original, db).after?.willRenew == true)
            #expect(try record(r, pull(0, 2000), original, db).after?.willRenew == false)
            let back = try record(r, pull(1, 3000), original, db)
            #expect(back.eventsAdded == 1, "auto-renew on again: the same statement as the first, after another")
            #expect(back.after?.willRenew == true)
            #expect(try record(r, pull(1, 4000), original, db).eventsAdded == 0)
        }
    }

    @Test func aRefundByPullIsItsOwnEventAndEndsAccess() throws {
        try withMigratedDatabase { db in
            let r = try reconciler()
            let original = "200000000000021"
            _ = try lapsed(db, original: original)
            let current = transaction("200000000000022", original: original, start: -Self.day, end: 29 * Self.day)
            _ = try record(r, Reconciler.Pull(environment: .production, statuses: [], history: [current]), original, db)
            let revoked = transaction(
                "200000000000022", original: original, start: -Self.day, end: 29 * Self.day,
                ["revocationDate": .int(now.millisecondsSinceEpoch - 60_000), "revocationReason": 0])
            let outcome = try record(
                r, Reconciler.Pull(environment: .production, statuses: [(5, revoked, nil)], history: [revoked]),
                original, db)
            #expect(outcome.changed)
            #expect(outcome.after?.phase == .revoked)
            #expect(outcome.after?.expiresAt == now.adding(milliseconds: -60_000))
            let key = "200000000000022:revoked:\(now.millisecondsSinceEpoch - 60_000)"
            #expect(try db.queryOne("SELECT kind FROM billing_events WHERE provider_event_id = \(key)")?.string("kind") == "refund")
        }
    }

    @Test func theScheduleSelectsClaimsBacksOffAndResets() throws {
        try withMigratedDatabase { db in
            var settings = BillingConfiguration.Reconcile()
            settings.afterSeconds = 3600
            settings.intervalSeconds = 300
            let schedule = ReconcileSchedule(settings)
            let original = "200000000000031"
            let user = try lapsed(db, original: original)
            let candidates = try schedule.candidates(now: now, on: db)
            #expect(candidates.map(\.subscriptionId) == [original])
            #expect(candidates.first?.userId == user)
            #expect(schedule.reason(candidates[0], now: now) == .renewalOverdue)

            #expect(try db.transaction { db in try schedule.claim(original, now: now, on: db) })
            #expect(try !db.transaction { db in try schedule.claim(original, now: now, on: db) }, "claimed once per interval")
            #expect(try schedule.candidates(now: now, on: db).isEmpty)
            #expect(try schedule.candidates(now: now.adding(milliseconds: 300_000), on: db).map(\.subscriptionId) == [original])

            let limited = ProviderAPIError(.rateLimited, status: 429, retryAfterSeconds: 7200)
            let next = try db.transaction { db in try schedule.recordFailure(original, error: limited, now: now, on: db) }
            #expect(next >= now.adding(milliseconds: 7_200_000))
            let row = try db.queryOne(
                """
                SELECT failures, last_outcome, last_error, pulls FROM billing_reconcile_state WHERE subscription_id = \(original)
                """)
            #expect(try row?.int64("failures") == 1)
            #expect(try row?.string("last_outcome") == "rate_limited")
            #expect(try row?.string("last_error") == "429")
            #expect(try schedule.candidates(now: now.adding(milliseconds: 3_600_000), on: db).isEmpty, "backing off")

            _ = try db.transaction { db in try schedule.recordFailure(original, error: ProviderAPIError(.status, status: 503), now: now, on: db) }
            #expect(try db.queryOne("SELECT failures FROM billing_reconcile_state WHERE subscription_id = \(original)")?.int64("failures") == 2)
            try db.transaction { db in try schedule.recordSuccess(original, environment: .production, changed: true, now: now, on: db) }
            let reset = try db.queryOne(
                """
                SELECT failures, last_outcome, corrections, pulls, next_attempt_at FROM billing_reconcile_state WHERE subscription_id = \(original)
                """)
            #expect(try reset?.int64("failures") == 0)
            #expect(try reset?.string("last_outcome") == "corrected")
            #expect(try reset?.int64("corrections") == 1)
            #expect(try reset?.int64("pulls") == 3)
            #expect(try reset?.timestamp("next_attempt_at") == now.adding(milliseconds: 300_000))
        }
    }
}
