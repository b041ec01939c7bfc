import Testing

@testable import Core

/// seeds/003's acceptance list against the real database: store events go through the
/// same ingestion as the webhook, consumption through `QuotaService.consume`, time through
/// explicit instants (no sleeping, no timing assertions).
@Suite struct QuotaTests {
    /// 2026-01-05 00:00 UTC; the user signs up there, so his 7-day windows start on days 0, 7, 14, ...
    static let t0 = Timestamp(CivilDateTime(year: 2026, month: 1, day: 5))
    static func day(_ n: Double) -> Timestamp { t0.adding(milliseconds: Int64(n * 86_400_000)) }

    struct Fixture {
        let db: DatabaseConnection
        let services: BillingServices
        let user = "6f1c1a8e-8a4e-4f37-9a44-\(String(UInt64.random(in: 0...0xffff_ffff_ffff), radix: 16).leftPadded(12))"
        var counter = 0

        init(_ db: DatabaseConnection) throws {
            self.db = db
            self.services = try BillingServices(configuration: BillingConfiguration())
            try UserDirectory.ensureKnown(user, source: .import, createdAt: QuotaTests.t0, now: QuotaTests.t0, on: db)
        }

        mutating func store(
            _ type: String, at: Double, product: String = "app.plus.monthly", entitlement: String = "plus",
            expires: Double, trial: Bool = false, extra: JSONObject = [:]
        ) throws {
            counter += 1
            var event: JSONObject = [
                "id": .string("\(user)-\(counter)"), "type": .string(type), "app_user_id": .string(user),
                "product_id": .string(product), "entitlement_ids": [.string(entitlement)],
                "period_type": trial ? "TRIAL" : "NORMAL", "original_transaction_id": .string("otx-\(user)"),
                "purchased_at_ms": .int(QuotaTests.day(at).millisecondsSinceEpoch),
                "expiration_at_ms": .int(QuotaTests.day(expires).millisecondsSinceEpoch),
                "event_timestamp_ms": .int(QuotaTests.day(at).millisecondsSinceEpoch), "environment": "PRODUCTION",
            ]
            for (k, v) in extra { event[k] = v }
            let delivery = try RevenueCatDelivery.decode(["event": .object(event)], tiers: services.tiers, idPattern: services.idPattern)
            _ = try EventIngestion.ingest(
                delivery.event, payload: delivery.payload, subjectCandidates: delivery.userCandidates,
                now: QuotaTests.day(at), on: db)
        }

        func consume(_ meter: String = "recurringGeneration", at: Double, key: String? = nil) throws -> QuotaService.Consumption {
            try QuotaService.consume(
                userId: user, meter: meter, amount: 1, idempotencyKey: key ?? "k-\(meter)-\(at)-\(UInt32.random(in: 0...UInt32.max))",
                now: QuotaTests.day(at), services: services, on: db)
        }

        func allowed(_ meter: String = "recurringGeneration", at: Double) throws -> Bool {
            if case .recorded(let answer) = try consume(meter, at: at) { return answer["overLimit"] == false }
            return false
        }

        func status(at: Double) throws -> QuotaStatus {
            var snapshot = try AccessSnapshot.load(userId: user, now: QuotaTests.day(at), cadence: { _ in nil }, on: db)!
            snapshot.quota = try QuotaService.status(for: snapshot, services: services, on: db)
            return snapshot.quota!
        }

        func balance(_ meter: String = "recurringGeneration", at: Double) throws -> MeterBalance {
            try status(at: at).balances.first { $0.meter == meter }!
        }

        func setEnforcement(_ value: Enforcement) throws {
            _ = try BillingFlags.setEnforcement(value, actor: "quota-tests", now: QuotaTests.t0, on: db)
            services.flags.invalidate()
        }
    }

    @Test func freeGetsOneRecurringCreditPerSevenDayWindow() throws {
        try withMigratedDatabase { db in
            let f = try Fixture(db)
            try f.setEnforcement(.enforce)
            #expect(try f.allowed(at: 0.5))
            #expect(
                try f.consume(at: 1)
                    == .refused(
                        meter: "recurringGeneration", placement: "generation_limit",
                        balance: MeterBalance(
                            meter: "recurringGeneration", limit: 1, used: 1,
                            window: QuotaWindow(start: Self.day(0), end: Self.day(7)))))
            #expect(try f.allowed(at: 6.999) == false)
            #expect(try f.allowed(at: 7), "a new window starts exactly 7 days after sign-up")
            #expect(
                try f.balance(at: 8)
                    == MeterBalance(
                        meter: "recurringGeneration", limit: 1, used: 1,
                        window: QuotaWindow(start: Self.day(7), end: Self.day(14))))
        }
    }

    @Test func trialHasOneCreditInTotalThenPlusHasTwoInTheRunningWindow() throws {
        try withMigratedDatabase { db in
            var f = try Fixture(db)
            try f.setEnforcement(.enforce)
            try f.store("INITIAL_PURCHASE", at: 1, expires: 8, trial: true)
            #expect(try f.status(at: 2).planTier == .trial)
            #expect(try f.allowed(at: 2))
            #expect(try f.allowed(at: 7.5) == false, "1 in total for the whole trial, even across the 7-day boundary")
            let trialBalance = try f.balance(at: 7.5)
            #expect(trialBalance.window == QuotaWindow(start: Self.day(1), end: Self.day(8)))
            // Conversion: Plus limits in the sign-up-anchored window [7, 14).
            try f.store("RENEWAL", at: 8, expires: 38)
            #expect(try f.status(at: 9).planTier == .plus)
            #expect(try f.allowed(at: 9))
            #expect(try f.allowed(at: 10))
            #expect(try f.allowed(at: 11) == false)
        }
    }

    @Test func upgradeKeepsTheWindowSoPlusWithTwoUsedHasThreeLeftOnPro() throws {
        try withMigratedDatabase { db in
            var f = try Fixture(db)
            try f.store("INITIAL_PURCHASE", at: 0.1, expires: 30)
            #expect(try f.allowed(at: 1))
            #expect(try f.allowed(at: 2))
            try f.store("PRODUCT_CHANGE", at: 3, expires: 30, extra: ["new_product_id": "app.pro.monthly"])
            #expect(try f.balance(at: 3).limit == 2, "a PRODUCT_CHANGE alone does not unlock Pro")
            try f.store("RENEWAL", at: 3.5, product: "app.pro.monthly", entitlement: "pro", expires: 33.5)
            let balance = try f.balance(at: 4)
            #expect(balance.limit == 5 && balance.used == 2 && balance.remaining == 3)
            #expect(balance.window == QuotaWindow(start: Self.day(0), end: Self.day(7)))
        }
    }

    @Test func downgradeKeepsProLimitsUntilTheRenewal() throws {
        try withMigratedDatabase { db in
            var f = try Fixture(db)
            try f.store("INITIAL_PURCHASE", at: 0.1, product: "app.pro.monthly", entitlement: "pro", expires: 10)
            try f.store(
                "PRODUCT_CHANGE", at: 2, product: "app.pro.monthly", entitlement: "pro", expires: 10,
                extra: ["new_product_id": "app.plus.monthly"])
            #expect(try f.balance(at: 9).limit == 5)
            try f.store("RENEWAL", at: 10, expires: 40)
            #expect(try f.balance(at: 11).limit == 2)
        }
    }

    @Test func freeOneTimeCreditsSurviveUpgradeExpiryAndRestore() throws {
        try withMigratedDatabase { db in
            var f = try Fixture(db)
            try f.setEnforcement(.enforce)
            for at in [0.2, 0.4, 0.6] { #expect(try f.allowed("oneTimeGeneration", at: at)) }
            #expect(try f.allowed("oneTimeGeneration", at: 0.8) == false)
            try f.store("INITIAL_PURCHASE", at: 1, expires: 2)
            #expect(try f.balance("oneTimeGeneration", at: 1.5).remaining == 0, "upgrading grants no fresh one-time credits")
            try f.store("EXPIRATION", at: 2, expires: 2)
            #expect(try f.balance("oneTimeGeneration", at: 2.5).remaining == 0, "expiry neither")
            // Restore: RevenueCat re-delivers the purchase (duplicate) and the app re-posts.
            try f.store("INITIAL_PURCHASE", at: 1, expires: 2)  // a new id: a restore replay of the same purchase
            #expect(try f.balance("oneTimeGeneration", at: 2.6).remaining == 0, "restore neither")
            #expect(try f.allowed("oneTimeGeneration", at: 3), "the next 3-day window does")
        }
    }

    @Test func cancellationNeverRemovesAccessOrLimitsEarly() throws {
        try withMigratedDatabase { db in
            var f = try Fixture(db)
            try f.store("INITIAL_PURCHASE", at: 0.1, product: "app.pro.monthly", entitlement: "pro", expires: 30)
            try f.store(
                "CANCELLATION", at: 1, product: "app.pro.monthly", entitlement: "pro", expires: 30,
                extra: ["cancel_reason": "UNSUBSCRIBE"])
            #expect(try f.status(at: 29).planTier == .pro)
            #expect(try f.status(at: 30).planTier == .free)
        }
    }

    @Test func sameKeyAnswersTheSameAndCountsOnce() throws {
        try withMigratedDatabase { db in
            let f = try Fixture(db)
            let first = try f.consume(at: 1, key: "retry-me")
            let again = try f.consume(at: 2, key: "retry-me")
            #expect(first == again)
            #expect(try f.balance(at: 3).used == 1)
            let error = #expect(throws: BillingError.self) {
                try QuotaService.consume(
                    userId: f.user, meter: "recurringGeneration", amount: 2, idempotencyKey: "retry-me",
                    now: Self.day(3), services: f.services, on: db)
            }
            // A domain error; the public route answers it 409 `idempotency_conflict`, as before.
            #expect(error?.code == .idempotencyMismatch)
            #expect(error?.apiError?.status.code == 409 && error?.apiError?.code == "idempotency_conflict")
        }
    }

    @Test func observeModeRecordsBeyondTheLimitAndSaysSo() throws {
        try withMigratedDatabase { db in
            let f = try Fixture(db)
            #expect(try f.allowed(at: 1))
            guard case .recorded(let answer) = try f.consume(at: 2) else {
                Issue.record("observe never refuses")
                return
            }
            #expect(answer["overLimit"] == true)
            #expect(try f.balance(at: 3).used == 2)
        }
    }

    @Test func tenConcurrentConsumersOfTheLastCreditExactlyOneSucceeds() throws {
        try withTestDatabase { configuration, environment in
            let setup = DatabaseConnection(configuration: configuration)
            try migrateTestDatabase(setup)
            let f = try Fixture(setup)
            try f.setEnforcement(.enforce)
            let user = f.user
            let waits = (0..<10).map { i in
                onThread { () throws -> Bool in
                    let db = DatabaseConnection(configuration: configuration)
                    let services = try BillingServices(configuration: BillingConfiguration())
                    let outcome = try QuotaService.consume(
                        userId: user, meter: "recurringGeneration", amount: 1,
                        idempotencyKey: "c\(i)", now: Self.day(1), services: services, on: db)
                    if case .recorded = outcome { return true }
                    return false
                }
            }
            let successes = try waits.map { try $0() }.filter { $0 }.count
            #expect(successes == 1)
            let rows = try setup.queryOne("SELECT COUNT(*) AS n FROM usage_ledger WHERE user_id = \(user)")
            #expect(try rows?.int64("n") == 1)
        }
    }

    @Test func aNewVersionAppliesToNewWindowsAndHistoryStaysReadable() throws {
        try withMigratedDatabase { db in
            let f = try Fixture(db)
            #expect(try f.allowed(at: 1))
            // Version 2 doubles Free's recurring credits, effective on day 3 (mid-window).
            var contract = try PlanContract(json: try db.queryOne("SELECT contract FROM plan_versions WHERE version = 1")!.json("contract")).json
            if case .object(var root) = contract, case .object(var tiers)? = root["tiers"], case .object(var free)? = tiers["free"],
                case .object(var meters)? = free["meters"]
            {
                meters["recurringGeneration"] = ["limit": 2, "window": ["days": 7]]
                free["meters"] = .object(meters)
                tiers["free"] = .object(free)
                root["tiers"] = .object(tiers)
                contract = .object(root)
            }
            _ = try PlanContract(json: contract)
            try db.execute(
                "INSERT INTO plan_versions (version, contract, published_at, published_by) VALUES (2, \(contract), \(Self.day(3)), 'test')")
            f.services.plans.invalidate()
            #expect(try f.balance(at: 4).limit == 1, "the running window keeps the version of its start")
            #expect(try f.status(at: 4).planVersion == 2)
            #expect(try f.balance(at: 8).limit == 2, "the next window uses version 2")
            let history = try db.query("SELECT plan_version FROM usage_ledger WHERE user_id = \(f.user)")
            #expect(try history.map { try $0.int64("plan_version") } == [1])
            #expect(throws: DatabaseError.self, "versions are immutable") {
                try db.execute("UPDATE plan_versions SET published_by = 'x' WHERE version = 1")
            }
        }
    }
}

extension String {
    func leftPadded(_ width: Int) -> String {
        count >= width ? self : String(repeating: "0", count: width - count) + self
    }
}
