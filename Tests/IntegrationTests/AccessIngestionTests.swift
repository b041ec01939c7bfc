import Foundation
import Testing

@testable import Core

private let hour: Int64 = 3_600_000
private let now = Timestamp(millisecondsSinceEpoch: 1_780_000_000_000)

private func at(_ hours: Int64) -> Timestamp { Timestamp(millisecondsSinceEpoch: now.millisecondsSinceEpoch + hours * hour) }

private func newUser() -> String { UUID().uuidString.lowercased() }

private func event(
    _ kind: EventKind, _ type: String, at hours: Int64, expires: Int64? = nil, sub: String,
    product: String = "app.plus.monthly", tier: Tier = .plus, trial: Bool = false, grace: Int64? = nil,
    newProduct: String? = nil, from: [String] = [], to: [String] = [], id: String? = nil
) -> StoreEvent {
    StoreEvent(
        provider: .revenuecat, providerEventId: id ?? "it-\(UUID().uuidString)", rawType: type, kind: kind,
        intrinsicAt: at(hours), subscriptionId: kind == .transfer ? nil : sub,
        productId: kind == .transfer ? nil : product, tier: kind == .transfer ? nil : tier,
        periodType: trial ? "TRIAL" : "NORMAL", isTrial: trial, environment: .production, platform: "app_store",
        purchasedAt: at(hours), expiresAt: expires.map(at), graceExpiresAt: grace.map(at),
        priceMilli: 4990, currency: "EUR", newProductId: newProduct,
        newTier: newProduct == nil ? nil : .pro, transferredFrom: from, transferredTo: to)
}

@discardableResult
private func ingest(_ e: StoreEvent, candidates: [String], on db: DatabaseConnection) throws -> EventIngestion.Outcome {
    try EventIngestion.ingest(e, payload: ["id": .string(e.providerEventId)], subjectCandidates: candidates, now: now, on: db)
}

private func storedSubscriptions(_ user: String, on db: DatabaseConnection) throws -> [SubscriptionState] {
    try db.query("SELECT \(unsafeRaw: SubscriptionState.columns) FROM billing_subscriptions s WHERE s.user_id = \(user) ORDER BY s.subscription_id")
        .map { try SubscriptionState(row: $0) }
}

private func accessRow(_ user: String, on db: DatabaseConnection) throws -> (revision: UInt64, updatedAt: Timestamp, applied: Int64) {
    let row = try #require(try db.queryOne("SELECT revision, updated_at, applied_events FROM billing_access WHERE user_id = \(user)"))
    return (try row.uint64("revision"), try row.timestamp("updated_at"), try row.int64("applied_events"))
}

private func count(_ query: SQLQuery, on db: DatabaseConnection) throws -> Int64 {
    try #require(try db.queryOne(query)).int64("n")
}

private func snapshot(_ user: String, on db: DatabaseConnection) throws -> AccessSnapshot {
    try #require(try AccessSnapshot.load(userId: user, now: now, cadence: { _ in nil }, on: db))
}

@Suite struct AccessIngestionTests {
    @Test func duplicateDeliveryChangesNothing() throws {
        try withMigratedDatabase { db in
            let user = newUser()
            try UserDirectory.ensureKnown(user, source: .token, createdAt: now, now: now, on: db)
            let purchase = event(.purchase, "INITIAL_PURCHASE", at: -1, expires: 720, sub: "s-\(user)")
            let first = try ingest(purchase, candidates: [user], on: db)
            #expect(first.duplicate == false && first.status == .applied && first.users == [user])
            let before = try accessRow(user, on: db)
            let subscriptions = try storedSubscriptions(user, on: db)
            #expect(before.revision == 1 && subscriptions.count == 1)

            let again = try ingest(purchase, candidates: [user], on: db)
            #expect(again == EventIngestion.Outcome(duplicate: true, status: nil, eventId: nil, users: []))
            #expect(again.json == ["duplicate": true])
            let after = try accessRow(user, on: db)
            #expect(after.revision == before.revision && after.updatedAt == before.updatedAt && after.applied == 1)
            #expect(try storedSubscriptions(user, on: db) == subscriptions)
            #expect(try count("SELECT COUNT(*) AS n FROM billing_events", on: db) == 1)
            #expect(try count("SELECT COUNT(*) AS n FROM billing_event_parties", on: db) == 1)
        }
    }

    @Test func unmatchedEventIsClaimedWhenTheUserBecomesKnown() throws {
        try withMigratedDatabase { db in
            let user = newUser()
            let alias = newUser()
            let trial = event(.purchase, "INITIAL_PURCHASE", at: -2, expires: 160, sub: "s-\(user)", trial: true)
            let outcome = try ingest(trial, candidates: [user, alias], on: db)
            #expect(outcome.status == .unmatched && outcome.users.isEmpty)
            #expect(try count("SELECT COUNT(*) AS n FROM billing_event_user_candidates", on: db) == 2)
            #expect(try AccessSnapshot.load(userId: user, now: now, cadence: { _ in nil }, on: db) == nil)

            #expect(try UserDirectory.ensureKnown(user, source: .token, createdAt: now, now: now, on: db) == true)
            let row = try #require(try db.queryOne("SELECT status, user_id FROM billing_events"))
            #expect(try row.string("status") == "applied" && row.optionalString("user_id") == user)
            // The subject is decided: no candidate of the event is left, the alias included.
            #expect(try count("SELECT COUNT(*) AS n FROM billing_event_user_candidates", on: db) == 0)
            let s = try snapshot(user, on: db)
            #expect(s.tier == .plus && s.phase == .trial && s.store?.trialEndsAt == at(160))
            let revision = s.revision

            // Becoming known again (every later request) is a no-op.
            #expect(try UserDirectory.ensureKnown(user, source: .token, createdAt: now, now: now, on: db) == false)
            #expect(try snapshot(user, on: db).revision == revision)
            // The alias never became a user and owns nothing.
            #expect(try UserDirectory.knownUsers([alias], on: db).isEmpty)
        }
    }

    /// The regression behind the fix in EventIngestion: a sender's purchase arriving after
    /// the TRANSFER that moves it used to re-fold only the sender, so the receiver got
    /// nothing and arrival order decided the outcome.
    @Test(arguments: [true, false]) func transferMovesTheSubscriptionWhateverTheArrivalOrder(purchaseFirst: Bool) throws {
        try withMigratedDatabase { db in
            let sender = newUser()
            let receiver = newUser()
            for user in [sender, receiver] { try UserDirectory.ensureKnown(user, source: .token, createdAt: now, now: now, on: db) }
            let purchase = event(.purchase, "INITIAL_PURCHASE", at: -3, expires: 720, sub: "s-\(sender)", product: "app.pro.monthly", tier: .pro)
            let transfer = event(.transfer, "TRANSFER", at: -1, sub: "", from: [sender], to: [receiver])
            let order = purchaseFirst ? [(purchase, [sender]), (transfer, [receiver])] : [(transfer, [receiver]), (purchase, [sender])]
            for (e, candidates) in order {
                #expect(try ingest(e, candidates: candidates, on: db).status == .applied)
            }
            let gained = try snapshot(receiver, on: db)
            #expect(gained.tier == .pro && gained.phase == .active && gained.store?.expiresAt == at(720))
            #expect(gained.store?.subscriptionId == "s-\(sender)")
            let lost = try snapshot(sender, on: db)
            #expect(lost.tier == .free && lost.store == nil)
            #expect(try storedSubscriptions(sender, on: db).isEmpty)
        }
    }

    @Test func lateEventOfAnUnknownSenderReachesTheKnownReceiver() throws {
        try withMigratedDatabase { db in
            let sender = newUser()
            let receiver = newUser()
            try UserDirectory.ensureKnown(receiver, source: .token, createdAt: now, now: now, on: db)
            let transfer = event(.transfer, "TRANSFER", at: -1, sub: "", from: [sender], to: [receiver])
            #expect(try ingest(transfer, candidates: [receiver], on: db).status == .applied)
            #expect(try snapshot(receiver, on: db).tier == .free)
            let purchase = event(.purchase, "INITIAL_PURCHASE", at: -3, expires: 720, sub: "s-\(sender)")
            let outcome = try ingest(purchase, candidates: [sender], on: db)
            #expect(outcome.status == .unmatched && outcome.users == [receiver])
            #expect(try snapshot(receiver, on: db).tier == .plus)
        }
    }

    @Test func transferToAUserWhoAppearsLater() throws {
        try withMigratedDatabase { db in
            let sender = newUser()
            let receiver = newUser()
            try UserDirectory.ensureKnown(sender, source: .token, createdAt: now, now: now, on: db)
            try ingest(event(.purchase, "INITIAL_PURCHASE", at: -3, expires: 720, sub: "s-\(sender)"), candidates: [sender], on: db)
            let transfer = event(.transfer, "TRANSFER", at: -1, sub: "", from: [sender], to: [receiver])
            #expect(try ingest(transfer, candidates: [receiver], on: db).status == .applied)
            #expect(try snapshot(sender, on: db).tier == .free)
            try UserDirectory.ensureKnown(receiver, source: .token, createdAt: now, now: now, on: db)
            let gained = try snapshot(receiver, on: db)
            #expect(gained.tier == .plus && gained.store?.subscriptionId == "s-\(sender)")
        }
    }

    /// How a candidate id stands when a delivery naming it arrives.
    enum CandidateState: CaseIterable, Sendable, CustomTestStringConvertible {
        case unknown, known, deleted, knownWithoutAccessRow
        var testDescription: String { "\(self)" }
        var isSubject: Bool { self == .known || self == .knownWithoutAccessRow }
    }

    /// The subject of a delivery is its first candidate (in the provider's preference order)
    /// that names a known, not deleted user, whatever the others are: for every pair of
    /// candidate states, both the first event and an in-order second one (folded onto the
    /// stored state) land on that user, or the event waits unmatched for both ids.
    @Test(arguments: CandidateState.allCases, CandidateState.allCases)
    func theSubjectIsTheFirstKnownCandidate(first: CandidateState, second: CandidateState) throws {
        try withMigratedDatabase { db in
            let candidates = [newUser(), newUser()]
            for (user, state) in zip(candidates, [first, second]) where state != .unknown {
                try UserDirectory.ensureKnown(user, source: .token, createdAt: now, now: now, on: db)
                if state == .deleted { try db.execute("UPDATE billing_users SET deleted_at = \(now) WHERE id = \(user)") }
                if state == .knownWithoutAccessRow { try db.execute("DELETE FROM billing_access WHERE user_id = \(user)") }
            }
            let expected = zip(candidates, [first, second]).first(where: { $0.1.isSubject })?.0
            let sub = "s-\(candidates[0])"
            let purchase = try ingest(event(.purchase, "INITIAL_PURCHASE", at: -3, expires: 10, sub: sub), candidates: candidates, on: db)
            let renewal = try ingest(event(.renewal, "RENEWAL", at: -1, expires: 20, sub: sub), candidates: candidates, on: db)
            for outcome in [purchase, renewal] {
                #expect(outcome.duplicate == false)
                #expect(outcome.status == (expected == nil ? .unmatched : .applied))
                #expect(outcome.users == (expected.map { [$0] } ?? []))
            }
            let owners = try db.query("SELECT user_id FROM billing_events ORDER BY id").map { try $0.optionalString("user_id") }
            #expect(owners == [expected, expected])
            #expect(try count("SELECT COUNT(*) AS n FROM billing_event_parties", on: db) == (expected == nil ? 0 : 2))
            for user in candidates {
                let subscriptions = try storedSubscriptions(user, on: db)
                if user == expected {
                    #expect(subscriptions.map(\.expiresAt) == [at(20)])
                    #expect(try accessRow(user, on: db).revision == 2 && accessRow(user, on: db).applied == 2)
                    let s = try snapshot(user, on: db)
                    #expect(s.tier == .plus && s.store?.expiresAt == at(20))
                } else {
                    #expect(subscriptions.isEmpty)
                }
            }
        }
    }

    @Test func refoldWithoutNewEventsIsIdempotent() throws {
        try withMigratedDatabase { db in
            let user = newUser()
            try UserDirectory.ensureKnown(user, source: .token, createdAt: now, now: now, on: db)
            try ingest(event(.purchase, "INITIAL_PURCHASE", at: -5, expires: 10, sub: "s-\(user)"), candidates: [user], on: db)
            try ingest(event(.cancellation, "CANCELLATION", at: -4, expires: 10, sub: "s-\(user)"), candidates: [user], on: db)
            let before = try accessRow(user, on: db)
            #expect(before.revision == 2)
            let subscriptions = try storedSubscriptions(user, on: db)
            for _ in 0..<3 {
                let result = try db.transaction(retries: 3, isolation: .readCommitted) { db in
                    try AccessProjector.refold(userId: user, now: at(1), on: db)
                }
                #expect(result.changed == false && result.revision == before.revision)
            }
            let after = try accessRow(user, on: db)
            #expect(after.revision == before.revision && after.updatedAt == before.updatedAt && after.applied == 2)
            #expect(try storedSubscriptions(user, on: db) == subscriptions)
        }
    }

    /// Found by scripts/bench --scale's reproject check: the fold's locking read named the
    /// access row's `last_event_at` and each subscription's alike, and a subscription read the
    /// user's (its latest event of all): with two subscriptions, every re-fold and every
    /// `events.reproject` saw the older one changed, moved the revision and wrote an
    /// `access.changed` though nothing had changed. Whichever subscription is the latest.
    @Test func refoldOfSeveralSubscriptionsIsIdempotent() throws {
        for latestFirst in [false, true] {
            try withMigratedDatabase { db in
                let user = newUser()
                try UserDirectory.ensureKnown(user, source: .token, createdAt: now, now: now, on: db)
                let (a, b) = latestFirst ? ("z-\(user)", "a-\(user)") : ("a-\(user)", "z-\(user)")
                try ingest(event(.purchase, "INITIAL_PURCHASE", at: -50, expires: 600, sub: a), candidates: [user], on: db)
                try ingest(event(.renewal, "RENEWAL", at: -30, expires: 700, sub: a), candidates: [user], on: db)
                try ingest(
                    event(.purchase, "INITIAL_PURCHASE", at: -5, expires: 700, sub: b, product: "app.pro.monthly", tier: .pro),
                    candidates: [user], on: db)
                let before = try accessRow(user, on: db)
                let subscriptions = try storedSubscriptions(user, on: db)
                #expect(subscriptions.count == 2 && subscriptions.map(\.lastEventAt).sorted() == [at(-30), at(-5)])
                let outbox = try count("SELECT COUNT(*) AS n FROM billing_outbox", on: db)
                for _ in 0..<2 {
                    let result = try db.transaction(retries: 3, isolation: .readCommitted) { db in
                        try AccessProjector.refold(userId: user, now: at(1), on: db)
                    }
                    #expect(result.changed == false && result.revision == before.revision)
                    let (differences, reprojected) = try EventAdmin.reproject(userId: user, actor: "test", now: at(1), on: db)
                    #expect(differences.isEmpty && reprojected.changed == false && reprojected.revision == before.revision)
                }
                let after = try accessRow(user, on: db)
                #expect(after.revision == before.revision && after.updatedAt == before.updatedAt && after.applied == 3)
                #expect(try storedSubscriptions(user, on: db) == subscriptions)
                #expect(try count("SELECT COUNT(*) AS n FROM billing_outbox", on: db) == outbox)
            }
        }
    }

    /// Shuffled deliveries for several users, then: what is stored equals a re-fold from the
    /// inbox, and equals the pure fold of the events as they were built (nothing is lost or
    /// altered on the way through the inbox columns).
    @Test func storedStateIsReproducibleFromTheInbox() throws {
        try withMigratedDatabase { db in
            let users = (0..<4).map { _ in newUser() }
            var history: [String: [StoreEvent]] = [:]
            for (i, user) in users.enumerated() {
                let sub = "s-\(user)"
                var events = [event(.purchase, "INITIAL_PURCHASE", at: -100, expires: -100 + 168, sub: sub, trial: i == 0)]
                for k in 1...5 {
                    events.append(event(.renewal, "RENEWAL", at: -100 + Int64(k) * 10, expires: 168 * Int64(k + 1), sub: sub))
                }
                events.append(event(.billingIssue, "BILLING_ISSUE", at: -30, expires: 1000, sub: sub, grace: 1100))
                events.append(event(.productChange, "PRODUCT_CHANGE", at: -20, expires: 1000, sub: sub, newProduct: "app.pro.yearly"))
                if i % 2 == 1 { events.append(event(.cancellation, "CANCELLATION", at: -10, expires: 1000, sub: sub)) }
                events.append(
                    event(.nonRenewingPurchase, "NON_RENEWING_PURCHASE", at: -5, sub: "lifetime-\(user)", product: "app.pro.lifetime", tier: .pro))
                history[user] = events
            }
            // Half of the users are known before their events, half after (claimed).
            for user in users.prefix(2) { try UserDirectory.ensureKnown(user, source: .token, createdAt: now, now: now, on: db) }
            var deliveries = users.flatMap { user in history[user]!.map { ($0, user) } }
            deliveries.shuffle()
            for (e, user) in deliveries { try ingest(e, candidates: [user], on: db) }
            for user in users.suffix(2) { try UserDirectory.ensureKnown(user, source: .token, createdAt: now, now: now, on: db) }

            for user in users {
                let stored = try storedSubscriptions(user, on: db)
                let fromInbox = StoreFold.fold(try AccessProjector.loadEvents(userId: user, on: db), userId: user)
                let pure = StoreFold.fold(history[user]!, userId: user)
                #expect(stored.count == 2)
                #expect(stored == fromInbox.subscriptions)
                #expect(stored == pure.subscriptions)
                #expect(try accessRow(user, on: db).applied == Int64(history[user]!.count))
                let s = try snapshot(user, on: db)
                #expect(s.tier == .pro && s.store?.productId == "app.pro.lifetime")
            }
        }
    }

    @Test func webhookSecretUnsetIs501AndWrongSecret401WithNothingWritten() throws {
        try withMigratedDatabase { db in
            let body = Array(#"{"api_version":"1.0","event":{"id":"e-1","type":"TEST","event_timestamp_ms":1}}"#.utf8)
            let headers: HTTPHeaders = ["Authorization": "Bearer s3cret"]
            let request = HTTPRequest(method: .post, path: "/api/v1/billing/webhooks/revenuecat", headers: headers, body: body)

            let unconfigured = BillingServices.unconfigured()
            let unset = BillingRequestContext(services: unconfigured, database: db)
            let notConfigured = #expect(throws: APIError.self) { try RevenueCatWebhook(unconfigured).handle(request, unset) }
            #expect(notConfigured?.status.code == 501)

            let quiet = Logger(sink: try LogSink(path: nil, minimumLevel: .critical))
            var configuration = BillingConfiguration()
            configuration.revenuecat.webhookSecret = "Bearer other"
            let wrongServices = try BillingServices(configuration: configuration, logger: quiet)
            let wrong = BillingRequestContext(services: wrongServices, database: db)
            let unauthorized = #expect(throws: APIError.self) { try RevenueCatWebhook(wrongServices).handle(request, wrong) }
            #expect(unauthorized?.status.code == 401 && unauthorized?.code == "bad_secret")
            #expect(try count("SELECT COUNT(*) AS n FROM billing_events", on: db) == 0)

            configuration.revenuecat.webhookSecret = "Bearer s3cret"
            let rightServices = try BillingServices(configuration: configuration, logger: quiet)
            let right = BillingRequestContext(services: rightServices, database: db)
            let response = try RevenueCatWebhook(rightServices).handle(request, right)
            #expect(response.status.code == 200)
            #expect(try count("SELECT COUNT(*) AS n FROM billing_events WHERE status = 'ignored'", on: db) == 1)
        }
    }
}
