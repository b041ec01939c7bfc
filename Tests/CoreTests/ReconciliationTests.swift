import Testing

@testable import Core

/// Reconciliation's pure parts: the App Store Server API token (claims and ES256
/// signature, checked with the public half of the key), the backoff schedule, the
/// sweeper's selection rules over every case, and the configuration keys.
@Suite struct AppStoreServerAPITokenTests {
    static let key = try! PrivateKey.generateEC()
    static let now = Timestamp(secondsSinceEpoch: 1_800_000_000)

    func token(lifetime: Int = 1200) throws -> AppStoreServerAPIToken {
        try AppStoreServerAPIToken(
            issuerId: "57246542-96fe-1a63-e053-0824d011072a", keyId: "2X9R4HXF34",
            bundleId: "com.example.app", privateKeyPEM: try Self.key.pem(), lifetimeSeconds: lifetime)
    }

    @Test func claimsAreApplesAndTheSignatureVerifiesWithThePublicKey() throws {
        let jwt = try token().make(now: Self.now)
        let jws = try CompactJWS.parse(jwt)
        #expect(jws.header["alg"] == "ES256")
        #expect(jws.header["kid"] == "2X9R4HXF34")
        #expect(jws.header["typ"] == "JWT")
        #expect(jws.payload["iss"] == "57246542-96fe-1a63-e053-0824d011072a")
        #expect(jws.payload["aud"] == "appstoreconnect-v1")
        #expect(jws.payload["bid"] == "com.example.app")
        #expect(jws.payload["iat"]?.int64Value == 1_800_000_000)
        #expect(jws.payload["exp"]?.int64Value == 1_800_001_200)
        #expect(jws.signature.count == 64, "JOSE's raw r‖s")
        let der = try ECDSASignature.derFromRaw(jws.signature)
        #expect(try Self.key.publicKey.verifySHA256(signature: der, message: jws.signingInput))
        let other = try PrivateKey.generateEC()
        #expect(!(try other.publicKey.verifySHA256(signature: der, message: jws.signingInput)))
    }

    @Test func lifetimeNeverExceedsSixtyMinutes() throws {
        let claims = try token(lifetime: 7200).claims(now: Self.now)
        #expect((claims["exp"]?.int64Value ?? 0) - (claims["iat"]?.int64Value ?? 0) == 3600)
    }

    @Test func onlyAnECP256KeyIsAccepted() throws {
        let rsa = try PrivateKey.generateRSA()
        #expect(throws: ConfigurationError.self) {
            _ = try AppStoreServerAPIToken(issuerId: "i", keyId: "k", bundleId: "b", privateKeyPEM: try rsa.pem(), lifetimeSeconds: 60)
        }
        #expect(throws: ConfigurationError.self) {
            _ = try AppStoreServerAPIToken(issuerId: "i", keyId: "k", bundleId: "b", privateKeyPEM: "not a key", lifetimeSeconds: 60)
        }
    }
}

@Suite struct RetryScheduleTests {
    let schedule = RetrySchedule(baseMilliseconds: 500, capMilliseconds: 8000)

    @Test func doublesUpToTheCap() {
        #expect((1...7).map { schedule.nominal(attempt: $0) } == [500, 1000, 2000, 4000, 8000, 8000, 8000])
        #expect(schedule.nominal(attempt: 1000) == 8000, "no overflow far out")
        #expect(schedule.nominal(attempt: 0) == 500)
    }

    @Test func jitterKeepsAtLeastHalfAndStaysBelowTheNominalWait() {
        for attempt in 1...6 {
            let nominal = schedule.nominal(attempt: attempt)
            #expect(schedule.delay(attempt: attempt, jitter: 0) == nominal / 2)
            #expect(schedule.delay(attempt: attempt, jitter: 0.5) == nominal / 2 + nominal / 4)
            #expect(schedule.delay(attempt: attempt, jitter: 0.999_999_9) < nominal)
            #expect(schedule.delay(attempt: attempt, jitter: 7) < nominal, "out-of-range jitter is clamped")
            for _ in 0..<20 {
                let random = schedule.randomDelay(attempt: attempt)
                #expect(random >= nominal / 2 && random < nominal)
            }
        }
    }

    @Test func perSubscriptionWaitsRespectRetryAfterAndTheInterval() {
        var reconcile = BillingConfiguration.Reconcile()
        reconcile.intervalSeconds = 300
        reconcile.maxBackoffSeconds = 3600
        let s = ReconcileSchedule(reconcile)
        let now = Timestamp(secondsSinceEpoch: 1_800_000_000)
        func wait(_ failures: Int, _ retryAfter: Int? = nil, jitter: Double = 0) -> Int64 {
            s.nextAttempt(after: now, failures: failures, retryAfterSeconds: retryAfter, jitter: jitter).millisecondsSinceEpoch
                - now.millisecondsSinceEpoch
        }
        #expect(wait(0) == 300_000, "a success waits one interval")
        #expect(wait(1) == 150_000)
        #expect(wait(2) == 300_000)
        #expect(wait(3) == 600_000)
        #expect(wait(10) == 1_800_000, "half the cap at jitter 0")
        #expect(wait(10, jitter: 0.999_999) < 3_600_000)
        #expect(wait(1, 1000) == 1_000_000, "never before Retry-After")
        #expect(wait(3, 5) == 600_000, "a short Retry-After does not shorten the backoff")
    }
}

@Suite struct ReconcileSelectionTests {
    static let now = Timestamp(secondsSinceEpoch: 1_800_000_000)
    static let hour: Int64 = 3_600_000
    static let day: Int64 = 86_400_000

    let schedule: ReconcileSchedule = {
        var reconcile = BillingConfiguration.Reconcile()
        reconcile.afterSeconds = 3600
        reconcile.endingWithinSeconds = 86_400
        return ReconcileSchedule(reconcile)
    }()

    func candidate(
        _ phase: AccessPhase, willRenew: Bool = true, endedAgo: Int64? = 2 * hour, graceIn: Int64? = nil,
        nextIn: Int64? = nil
    ) -> ReconcileSchedule.Candidate {
        ReconcileSchedule.Candidate(
            subscriptionId: "1000", userId: "u", phase: phase, willRenew: willRenew,
            expiresAt: endedAgo.map { Self.now.adding(milliseconds: -$0) },
            graceExpiresAt: graceIn.map { Self.now.adding(milliseconds: $0) },
            nextAttemptAt: nextIn.map { Self.now.adding(milliseconds: $0) })
    }

    func reason(_ c: ReconcileSchedule.Candidate) -> ReconcileSchedule.Reason? { schedule.reason(c, now: Self.now) }

    @Test func aPeriodThatEndedLongEnoughAgoWhileSetToRenewIsOverdue() {
        for phase in [AccessPhase.active, .trial, .billingRetry] {
            #expect(reason(candidate(phase)) == .renewalOverdue, "\(phase)")
            #expect(reason(candidate(phase, endedAgo: Self.hour)) == .renewalOverdue, "exactly afterSeconds ago: \(phase)")
        }
    }

    @Test func aPeriodThatEndedRecentlyOrStillRunsIsNotYetOverdue() {
        #expect(reason(candidate(.active, endedAgo: Self.hour - 1)) == nil)
        #expect(reason(candidate(.active, endedAgo: -Self.day)) == nil, "the period still runs")
        #expect(reason(candidate(.trial, endedAgo: 0)) == nil)
    }

    @Test func notSetToRenewIsNotOverdue() {
        #expect(reason(candidate(.active, willRenew: false)) == nil)
        #expect(reason(candidate(.trial, willRenew: false, endedAgo: 10 * Self.day)) == nil)
    }

    @Test func endedPhasesAreNeverPulled() {
        for phase in [AccessPhase.none, .canceled, .expired, .revoked] {
            #expect(reason(candidate(phase, endedAgo: 10 * Self.day, graceIn: 0)) == nil, "\(phase)")
        }
    }

    @Test func noEndNoPull() {
        #expect(reason(candidate(.active, endedAgo: nil)) == nil, "a lifetime purchase never renews")
    }

    @Test func aGracePeriodEndingSoonOrEndedWithNoNewsIsPulled() {
        #expect(reason(candidate(.grace, graceIn: Self.hour)) == .graceEnding)
        #expect(reason(candidate(.grace, graceIn: Self.day)) == .graceEnding, "exactly endingWithinSeconds ahead")
        #expect(reason(candidate(.grace, graceIn: -Self.hour)) == .graceEnding, "ended and nothing said what followed")
        #expect(reason(candidate(.grace, willRenew: false, graceIn: Self.hour)) == .graceEnding)
        #expect(reason(candidate(.grace, graceIn: Self.day + 1)) == nil, "not about to end")
        #expect(reason(candidate(.grace, graceIn: nil)) == nil)
    }

    @Test func aBillingRetryAboutToEndIsPulledEvenWhenNotSetToRenew() {
        let ending = 60 * Self.day - Self.hour  // the 60-day retry ends in an hour
        #expect(reason(candidate(.billingRetry, willRenew: false, endedAgo: ending)) == .billingRetryEnding)
        #expect(reason(candidate(.billingRetry, willRenew: false, endedAgo: 30 * Self.day)) == nil)
        #expect(reason(candidate(.billingRetry, willRenew: true, endedAgo: ending)) == .renewalOverdue, "the first rule wins")
    }

    @Test func atMostOncePerIntervalAndNotWhileBackingOff() {
        #expect(reason(candidate(.active, nextIn: 1)) == nil, "pulled within the interval, or backing off")
        #expect(reason(candidate(.grace, graceIn: Self.hour, nextIn: Self.hour)) == nil)
        #expect(reason(candidate(.active, nextIn: 0)) == .renewalOverdue, "due again")
        #expect(reason(candidate(.active, nextIn: -Self.day)) == .renewalOverdue)
    }

    @Test func lagCountsFromWhenTheRuleMadeItDue() {
        let c = candidate(.active, endedAgo: 3 * Self.hour)
        #expect(ReconcileService.lag(of: c, reason: .renewalOverdue, schedule: schedule, now: Self.now) == 7200)
        let backedOff = candidate(.active, endedAgo: 3 * Self.hour, nextIn: -Self.hour / 2)
        #expect(ReconcileService.lag(of: backedOff, reason: .renewalOverdue, schedule: schedule, now: Self.now) == 1800)
    }
}

@Suite struct ReconcileConfigurationTests {
    @Test func defaultsAndValidation() throws {
        let defaults = try BillingConfiguration(json: ["database": ["socket": "/tmp/x.sock"]])
        #expect(defaults.reconcile == BillingConfiguration.Reconcile())
        #expect(defaults.reconcile.afterSeconds == 3600 && defaults.reconcile.intervalSeconds == 300 && defaults.reconcile.batchSize == 100)
        #expect(!defaults.apple.serverApi.isConfigured)
        #expect(defaults.apple.serverApi.productionUrl == "https://api.storekit.itunes.apple.com")
        #expect(defaults.apple.serverApi.sandboxUrl == "https://api.storekit-sandbox.itunes.apple.com")

        let set = try BillingConfiguration(json: [
            "database": ["socket": "/tmp/x.sock"],
            "apple": ["serverApi": ["issuerId": "i", "keyId": "k", "privateKey": "pem", "productionUrl": "https://127.0.0.1:1/p"]],
            "reconcile": ["afterSeconds": 60, "intervalSeconds": 10, "batchSize": 5],
        ])
        #expect(set.apple.serverApi.isConfigured)
        #expect(set.reconcile.batchSize == 5)

        func problems(_ json: JSON) -> String {
            do {
                _ = try BillingConfiguration(json: json)
                return ""
            } catch { return "\(error)" }
        }
        #expect(problems(["database": ["socket": "/s"], "apple": ["serverApi": ["issuerId": "i"]]]).contains("apple.serverApi.privateKey"))
        #expect(problems(["database": ["socket": "/s"], "apple": ["serverApi": ["sandboxUrl": "http://x"]]]).contains("apple.serverApi.sandboxUrl"))
        #expect(problems(["database": ["socket": "/s"], "reconcile": ["batchSize": 0]]).contains("reconcile.batchSize"))
        #expect(problems(["database": ["socket": "/s"], "reconcile": ["typo": 1]]).contains("reconcile.typo: unknown key"))
    }

    @Test func aKeyWithoutAppStoreVerificationDoesNotStart() throws {
        var configuration = BillingConfiguration()
        configuration.apple.serverApi.issuerId = "i"
        configuration.apple.serverApi.keyId = "k"
        configuration.apple.serverApi.privateKey = try PrivateKey.generateEC().pem()
        #expect(throws: ConfigurationError.self) { _ = try BillingServices(configuration: configuration) }
    }
}

@Suite struct ProviderAPIErrorTests {
    @Test func notFoundIsApplesTransactionIdNotFound() {
        #expect(ProviderAPIError(.status, status: 404, errorCode: 4_040_010).isTransactionNotFound)
        #expect(!ProviderAPIError(.status, status: 404, errorCode: 4_040_001).isTransactionNotFound)
        #expect(!ProviderAPIError(.status, status: 500).isTransactionNotFound)
    }

    @Test func statusLabelsAndCodesCarryNoPayload() {
        #expect(ProviderAPIError(.status, status: 503, errorCode: 5_000_000).code == "503/5000000")
        #expect(ProviderAPIError(.rateLimited, status: 429, retryAfterSeconds: 5).statusLabel == "429")
        #expect(ProviderAPIError(.transport, detail: "timeout: Timeout was reached").statusLabel == "timeout")
        #expect(ProviderAPIError(.transport, detail: "Couldn't connect to server").statusLabel == "transport")
        #expect(ProviderAPIError(.verification, detail: "untrusted_chain").code == "verification:untrusted_chain")
    }

    @Test func identifiersArePercentEncodedInURLs() {
        #expect(AppStoreServerAPI.pathSegment("2000000123456789") == "2000000123456789")
        #expect(AppStoreServerAPI.pathSegment("../x?y") == "..%2Fx%3Fy")
    }
}

/// What pulled App Store data becomes in the inbox (already verified payloads).
@Suite struct PulledDeliveryTests {
    static let catalog: AppleDelivery.Catalog = ["com.example.plus.monthly": .init(tier: .plus, cadence: .monthly)]
    static let pattern = UserIdPattern(BillingConfiguration.Users.uuidPattern)!

    func transaction(_ extra: JSONObject = [:]) -> JSON {
        var t: JSONObject = [
            "transactionId": "2000000002", "originalTransactionId": "2000000001", "productId": "com.example.plus.monthly",
            "environment": "Production", "purchaseDate": 1_700_000_000_000, "expiresDate": 1_702_592_000_000,
            "signedDate": 1_800_000_000_000,
        ]
        for (k, v) in extra { t[k] = v }
        return .object(t)
    }

    @Test func aHistoryTransactionFoldsAtItsPeriodStartUnderItsTransactionId() throws {
        let d = try AppleDelivery.pulledTransaction(transaction(), catalog: Self.catalog, idPattern: Self.pattern)
        #expect(d.event.provider == .appleTransaction)
        #expect(d.event.providerEventId == "2000000002")
        #expect(d.event.kind == .renewal)
        #expect(d.event.intrinsicAt == Timestamp(millisecondsSinceEpoch: 1_700_000_000_000), "not the pull's signedDate")
        #expect(d.event.tier == .plus)
    }

    @Test func aRevokedHistoryTransactionIsNewsKeyedByItsRevocation() throws {
        let d = try AppleDelivery.pulledTransaction(
            transaction(["revocationDate": 1_701_000_000_000]), catalog: Self.catalog,
            idPattern: Self.pattern)
        #expect(d.event.kind == .refund)
        #expect(d.event.providerEventId == "2000000002:revoked:1701000000000")
        #expect(d.event.intrinsicAt == Timestamp(millisecondsSinceEpoch: 1_701_000_000_000))
        #expect(d.event.expiresAt == Timestamp(millisecondsSinceEpoch: 1_701_000_000_000))
        let family = try AppleDelivery.pulledTransaction(
            transaction(["revocationDate": 1_701_000_000_000, "inAppOwnershipType": "FAMILY_SHARED"]),
            catalog: Self.catalog, idPattern: Self.pattern)
        #expect(family.event.kind == .revoke)
    }

    @Test func aStatusCarriesItsRenewalInfoAndFoldsAtThePull() throws {
        let renewal: JSON = [
            "originalTransactionId": "2000000001", "autoRenewStatus": 0, "autoRenewProductId": "com.example.plus.monthly",
            "isInBillingRetryPeriod": true, "gracePeriodExpiresDate": 1_800_100_000_000, "signedDate": 1_800_000_000_500,
            "environment": "Production",
        ]
        let d = try AppleDelivery.pulledStatus(
            status: 4, transaction: transaction(), renewal: renewal, id: "status:x",
            catalog: Self.catalog, idPattern: Self.pattern)
        #expect(d.event.kind == .unknown, "the transaction states the period, the renewal info the rest")
        #expect(d.event.rawType == "SUBSCRIPTION_STATUS/4")
        #expect(d.event.willRenew == false)
        #expect(d.event.inBillingRetry == true)
        #expect(d.event.graceExpiresAt == Timestamp(millisecondsSinceEpoch: 1_800_100_000_000))
        #expect(d.event.intrinsicAt == Timestamp(millisecondsSinceEpoch: 1_800_000_000_500))
        let expired = try AppleDelivery.pulledStatus(
            status: 2, transaction: transaction(), renewal: nil, id: "status:y",
            catalog: Self.catalog, idPattern: Self.pattern)
        #expect(expired.event.kind == .expiration)
    }

    @Test func theStatusDigestIgnoresWhenAppleSignedIt() throws {
        let a = try AppleDelivery.pulledStatus(
            status: 1, transaction: transaction(), renewal: nil, id: "", catalog: Self.catalog,
            idPattern: Self.pattern)
        let b = try AppleDelivery.pulledStatus(
            status: 1, transaction: transaction(["signedDate": 1_900_000_000_000]), renewal: nil, id: "",
            catalog: Self.catalog, idPattern: Self.pattern)
        let c = try AppleDelivery.pulledStatus(
            status: 1, transaction: transaction(["expiresDate": 1_705_000_000_000]), renewal: nil, id: "",
            catalog: Self.catalog, idPattern: Self.pattern)
        #expect(Reconciler.digest(a.event) == Reconciler.digest(b.event))
        #expect(Reconciler.digest(a.event) != Reconciler.digest(c.event))
    }
}

@Suite struct ReconcilePauseTests {
    @Test func aRateLimitPausesTheSweeperUntilRetryAfterAndNeverShortensAPause() {
        let pause = ReconcilePause()
        let now = Timestamp(secondsSinceEpoch: 1_800_000_000)
        #expect(!pause.isPaused(at: now))
        pause.pause(until: now.adding(milliseconds: 60_000))
        #expect(pause.isPaused(at: now))
        #expect(pause.isPaused(at: now.adding(milliseconds: 59_999)))
        #expect(!pause.isPaused(at: now.adding(milliseconds: 60_000)))
        pause.pause(until: now.adding(milliseconds: 1000))
        #expect(pause.isPaused(at: now.adding(milliseconds: 30_000)), "a shorter Retry-After does not end a longer pause")
    }
}

@Suite struct ReconcileMetricsTests {
    @Test func countersByOutcomeAndStatusAsPrometheusText() {
        let metrics = ReconcileMetrics()
        metrics.pulled(.corrected)
        metrics.pulled(.corrected)
        metrics.pulled(.failed)
        metrics.apiError(ProviderAPIError(.status, status: 503))
        metrics.apiError(ProviderAPIError(.transport, detail: "timeout: Timeout was reached"))
        metrics.sweepLagSeconds.set(42)
        let text = metrics.prometheus
        #expect(text.contains("# TYPE billing_reconcile_pulls_total counter\n"))
        #expect(text.contains("billing_reconcile_pulls_total{outcome=\"corrected\"} 2\n"))
        #expect(text.contains("billing_reconcile_pulls_total{outcome=\"failed\"} 1\n"))
        #expect(text.contains("billing_reconcile_pulls_total{outcome=\"unchanged\"} 0\n"))
        #expect(text.contains("billing_reconcile_corrected_total 2\n"))
        #expect(text.contains("billing_reconcile_api_errors_total{status=\"503\"} 1\n"))
        #expect(text.contains("billing_reconcile_api_errors_total{status=\"timeout\"} 1\n"))
        #expect(text.contains("# TYPE billing_reconcile_sweep_lag_seconds gauge\nbilling_reconcile_sweep_lag_seconds 42\n"))
    }
}
