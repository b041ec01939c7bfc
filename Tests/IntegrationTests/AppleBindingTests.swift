import Foundation
import Testing

@testable import Core

/// Binding under `restore_moves` and the quarantine re-run after a trust fix, against the
/// real MariaDB with the Apple-shaped CA scripts/test generates ($BILLING_TEST_APPLE_CA_DIR).
@Suite struct AppleBindingTests {
    let now = Timestamp(millisecondsSinceEpoch: 1_780_000_000_000)
    let pattern = UserIdPattern(BillingConfiguration.Users.uuidPattern)!
    let catalog: AppleDelivery.Catalog = ["com.example.plus.monthly": .init(tier: .plus, cadence: .monthly)]

    func ca() throws -> String {
        guard let dir = ProcessInfo.processInfo.environment["BILLING_TEST_APPLE_CA_DIR"], !dir.isEmpty else {
            throw TestEnvironment.Missing(variable: "BILLING_TEST_APPLE_CA_DIR", meaning: "the App Store test CA (scripts/test)")
        }
        return dir
    }

    func sign(_ payload: JSON, chain: String) throws -> String {
        let dir = try ca()
        let x5c: [JSON] = try ["leaf", "intermediate", "root"].map { .string(Base64.encode(try FileIO.read("\(dir)/\(chain)-\($0).der"))) }
        return try CompactJWS.sign(
            payload: payload, header: ["x5c": .array(x5c)],
            key: try PrivateKey(pem: try FileIO.readString("\(dir)/\(chain)-leaf-key.pem")), algorithm: "ES256")
    }

    func verifier(root: String, bundleId: String = "com.example.fcgibilling") throws -> AppleSignedDataVerifier {
        AppleSignedDataVerifier(
            rootCertificates: [try FileIO.read("\(try ca())/\(root)-root.der")], bundleId: bundleId,
            appAppleId: 1234567, environments: ["Production", "Sandbox"])
    }

    /// What billing-rpc builds from a configuration trusting `root`.
    func services(root: String, bundleId: String = "com.example.fcgibilling") throws -> BillingServices {
        var configuration = BillingConfiguration()
        configuration.apple.trustedRootsFiles = ["\(try ca())/\(root)-root.der"]
        configuration.apple.bundleId = bundleId
        configuration.apple.appAppleId = 1234567
        configuration.products = catalog
        return try BillingServices(configuration: configuration)
    }

    func transaction(_ id: String, original: String) -> JSON {
        [
            "transactionId": .string(id), "originalTransactionId": .string(original), "bundleId": "com.example.fcgibilling",
            "productId": "com.example.plus.monthly", "purchaseDate": .int(now.millisecondsSinceEpoch - 1000),
            "expiresDate": .int(now.millisecondsSinceEpoch + 30 * 86_400_000), "signedDate": .int(now.millisecondsSinceEpoch),
            "environment": "Production", "price": 4990, "currency": "EUR",
        ]
    }

    func tier(_ user: String, _ db: DatabaseConnection) throws -> Tier {
        try AccessSnapshot.load(userId: user, now: now, cadence: { _ in nil }, on: db)?.tier ?? .free
    }

    func post(
        _ user: String, _ jws: String, restore: Bool, policy: BillingConfiguration.Binding.Policy,
        _ db: DatabaseConnection
    ) throws -> AppleBinding.Decision {
        let delivery = try AppleDelivery.postedTransaction(jws, verifier: try verifier(root: "a"), catalog: catalog, idPattern: pattern, now: now)
        let t = try #require(delivery.transaction)
        let decision = try AppleBinding.bind(
            subscriptionId: t.originalTransactionId, userId: user, restore: restore, policy: policy,
            transactionId: t.transactionId, environment: t.environment, now: now, on: db)
        if case .denied = decision { return decision }
        _ = try AppleIngestion.ingest(delivery, policy: policy, now: now, on: db)
        return decision
    }

    @Test func restoreMovesOnlyWithRestoreAndThePreviousOwnerLosesAccess() throws {
        try withMigratedDatabase { db in
            let owner = "11111111-1111-4111-8111-111111111111"
            let other = "22222222-2222-4222-8222-222222222222"
            for user in [owner, other] { try UserDirectory.ensureKnown(user, source: .token, createdAt: now, now: now, on: db) }
            let first = try sign(transaction("500", original: "500"), chain: "a")
            #expect(try post(owner, first, restore: false, policy: .restoreMoves, db) == .bound)
            #expect(try tier(owner, db) == .plus)
            // Without restore: refused even under restore_moves.
            #expect(try post(other, first, restore: false, policy: .restoreMoves, db) == .denied(owner: owner))
            #expect(try tier(other, db) == .free)
            // An explicit restore moves it: the previous owner loses that access.
            #expect(try post(other, first, restore: true, policy: .restoreMoves, db) == .moved(from: owner))
            #expect(try tier(other, db) == .plus)
            #expect(try tier(owner, db) == .free)
            // Under deny, even a restore is refused.
            #expect(try post(owner, first, restore: true, policy: .deny, db) == .denied(owner: other))
            let actions = try db.query("SELECT action FROM billing_binding_audit WHERE original_transaction_id = '500' ORDER BY id")
                .map { (row) throws(DatabaseError) -> String in try row.string("action") }
            #expect(actions == ["bound", "denied", "moved", "denied"])
        }
    }

    @Test func quarantinedNotificationIsReRunAfterTheSettingIsFixed() throws {
        try withMigratedDatabase { db in
            let user = "33333333-3333-4333-8333-333333333333"
            try UserDirectory.ensureKnown(user, source: .token, createdAt: now, now: now, on: db)
            // Apple signs (chain A, trusted) for the app; the configuration names the bundle
            // with a typo: the signature verifies, a setting refuses it, it is quarantined.
            let typo = "com.example.fcgibiling"
            let note: JSON = [
                "notificationType": "SUBSCRIBED", "subtype": "INITIAL_BUY", "notificationUUID": "q-1",
                "signedDate": .int(now.millisecondsSinceEpoch),
                "data": [
                    "bundleId": "com.example.fcgibilling", "environment": "Production", "appAppleId": 1234567,
                    "signedTransactionInfo": .string(
                        try sign(transaction("700", original: "700").merged(["appAccountToken": .string(user)]), chain: "a")),
                ],
            ]
            let signedPayload = try sign(note, chain: "a")
            let body = Array((["signedPayload": .string(signedPayload)] as JSON).serialized())
            var refusal: AppleVerificationError?
            do {
                _ = try AppleWebhook.decode(
                    body: body, verifier: try verifier(root: "a", bundleId: typo), catalog: catalog, idPattern: pattern, now: now)
            } catch let error as AppleVerificationError { refusal = error }
            let error = try #require(refusal)
            #expect(error.reason == .bundleMismatch && error.isSettingMismatch)
            let id = try #require(
                try AppleQuarantine.record(provider: .appleNotification, signedPayload: signedPayload, error: error, now: now, on: db))
            #expect(try AppleQuarantine.record(provider: .appleNotification, signedPayload: signedPayload, error: error, now: now, on: db) == id)
            #expect(
                try db.queryOne("SELECT payload FROM billing_quarantine WHERE id = \(id)")?.bytes("payload") == Array(signedPayload.utf8),
                "only the signedPayload is kept")

            // Still misconfigured: stays quarantined. (The replayers events.retryQuarantined
            // uses, with services configured as the daemon would be.)
            let untrusted = BillingRPCMethods.quarantineReplayers(services: try services(root: "a", bundleId: typo))
            let still = try untrusted.retry(ids: [id], limit: 1, actor: "ops@test", now: now, on: db)
            #expect(still.map { $0["outcome"]?.stringValue } == ["still_failing"])
            #expect(still.first?["reason"]?.stringValue == "bundle_mismatch")
            #expect(try tier(user, db) == .free)
            // The operator fixes apple.bundleId: the re-run applies it, once.
            let trusted = BillingRPCMethods.quarantineReplayers(services: try services(root: "a"))
            let fixed = try trusted.retry(ids: [id, id, 999_999], limit: 3, actor: "ops@test", now: now, on: db)
            #expect(fixed.map { $0["outcome"]?.stringValue } == ["applied", "already_resolved", "not_found"])
            #expect(try tier(user, db) == .plus)
            let eventId = try #require(fixed.first?["eventId"]?.int64Value)
            let row = try #require(try db.queryOne("SELECT deliveries, retry_count, resolution, event_id FROM billing_quarantine WHERE id = \(id)"))
            #expect(try row.int64("deliveries") == 2 && row.int64("retry_count") == 2 && row.string("resolution") == "applied")
            #expect(try row.int64("event_id") == eventId)
            // One audit row per replay that changed the row, none for the rows left alone.
            let audited = try db.query("SELECT detail FROM audit_log WHERE actor = 'ops@test' AND action = 'events.retryQuarantined' ORDER BY id")
                .map { (row) throws(DatabaseError) -> String? in try row.optionalJSON("detail")?["outcome"]?.stringValue }
            #expect(audited == ["still_failing", "applied"])
        }
    }
}

extension JSON {
    func merged(_ extra: JSONObject) -> JSON {
        guard case .object(var object) = self else { return self }
        for (k, v) in extra { object[k] = v }
        return .object(object)
    }
}
