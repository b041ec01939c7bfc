import Testing

@testable import Core

@Suite struct AppleVerifierTests {
    let now = Timestamp(millisecondsSinceEpoch: 1_780_000_000_000)

    func reason(_ body: () throws -> Void) -> AppleVerificationError.Reason? {
        do {
            try body()
            return nil
        } catch let error as AppleVerificationError { return error.reason } catch { return nil }
    }

    @Test func acceptsAValidTransaction() throws {
        let ca = try AppleTestCA.load()
        let payload = try ca.verifier().verifyTransaction(try ca.sign(AppleTestCA.transaction()), now: now)
        #expect(payload["originalTransactionId"]?.stringValue == "1000")
    }

    @Test func failureReasons() throws {
        let ca = try AppleTestCA.load()
        let v = try ca.verifier()
        let tx = AppleTestCA.transaction()
        #expect(reason { _ = try v.verifyTransaction(try ca.sign(tx, chain: "b"), now: now) } == .untrustedChain)
        // Chain B presenting the trusted root as its third certificate: still untrusted.
        let mixed = try Array(ca.x5c("b").prefix(2)) + [Base64.encode(try ca.der("a-root"))]
        #expect(reason { _ = try v.verifyTransaction(try ca.sign(tx, chain: "b", x5c: mixed), now: now) } == .untrustedChain)
        #expect(reason { _ = try v.verifyTransaction(try ca.sign(tx, x5c: Array(try ca.x5c("a").prefix(2))), now: now) } == .invalidChainLength)
        #expect(
            reason { _ = try v.verifyTransaction(try ca.sign(tx, x5c: try ca.x5c("a") + ca.x5c("a").suffix(1)), now: now) } == .invalidChainLength)
        #expect(reason { _ = try v.verifyTransaction(try ca.sign(tx, algorithm: "RS256"), now: now) } == .unsupportedAlgorithm)
        #expect(reason { _ = try v.verifyTransaction(try ca.sign(tx, key: "a-intermediate"), now: now) } == .badSignature)
        #expect(reason { _ = try v.verifyTransaction(try ca.sign(tx, x5c: ["!!!!"] + ca.x5c("a").suffix(2)), now: now) } == .invalidCertificate)
        #expect(reason { _ = try v.verifyTransaction("a.b", now: now) } == .malformed)
        let wrongBundle = AppleTestCA.transaction(extra: ["bundleId": "x.y"])
        #expect(reason { _ = try v.verifyTransaction(try ca.sign(wrongBundle), now: now) } == .bundleMismatch)
        #expect(reason { _ = try ca.verifier(environments: ["Sandbox"]).verifyTransaction(try ca.sign(tx), now: now) } == .environmentNotAccepted)
        // Before the test CA's validity (2020): the leaf is not valid at signedDate.
        let old = AppleTestCA.transaction(signed: 1_500_000_000_000)
        #expect(reason { _ = try v.verifyTransaction(try ca.sign(old), now: now) } == .untrustedChain)
        #expect(
            reason {
                _ = try AppleSignedDataVerifier(rootCertificates: [], bundleId: "b", appAppleId: nil, environments: []).verifySignedData(
                    try ca.sign(tx), now: now)
            } == .notConfigured)
    }

    @Test func notificationChecksAppAppleIdInProductionOnly() throws {
        let ca = try AppleTestCA.load()
        let v = try ca.verifier()
        func note(_ environment: String, appAppleId: Int64) -> JSON {
            [
                "notificationType": "TEST", "notificationUUID": "n-1", "signedDate": .int(1_780_000_000_000),
                "data": ["bundleId": "com.example.fcgibilling", "environment": .string(environment), "appAppleId": .int(appAppleId)],
            ]
        }
        #expect(reason { _ = try v.verifyNotification(try ca.sign(note("Production", appAppleId: 1234567)), now: now) } == nil)
        #expect(reason { _ = try v.verifyNotification(try ca.sign(note("Production", appAppleId: 7)), now: now) } == .appAppleIdMismatch)
        #expect(reason { _ = try v.verifyNotification(try ca.sign(note("Sandbox", appAppleId: 7)), now: now) } == nil)
    }

    @Test func notificationDecodesIntoAStoreEvent() throws {
        let ca = try AppleTestCA.load()
        let pattern = try #require(UserIdPattern(BillingConfiguration.Users.uuidPattern))
        let token = "6f1c1a8e-8a4e-4f37-9a44-1d2b3c4d5e6f"
        let tx = AppleTestCA.transaction(
            id: "2000", original: "1000", product: "com.example.pro.monthly", expires: 1_782_000_000_000,
            extra: [
                "revocationDate": .int(1_781_000_000_000), "offerType": 1, "offerDiscountType": "FREE_TRIAL",
                "appAccountToken": .string(token.uppercased()),
            ])
        let renewal: JSON = [
            "autoRenewStatus": 0, "autoRenewProductId": "com.example.plus.monthly", "environment": "Production",
            "gracePeriodExpiresDate": .int(1_781_500_000_000), "signedDate": .int(1_780_000_000_000),
        ]
        let outer: JSON = [
            "notificationType": "DID_CHANGE_RENEWAL_PREF", "subtype": "DOWNGRADE", "notificationUUID": "uuid-1",
            "signedDate": .int(1_780_000_100_000),
            "data": [
                "bundleId": "com.example.fcgibilling", "environment": "Production", "appAppleId": 1234567,
                "signedTransactionInfo": .string(try ca.sign(tx)), "signedRenewalInfo": .string(try ca.sign(renewal)),
            ],
        ]
        let d = try AppleDelivery.notification(
            signedPayload: try ca.sign(outer), verifier: try ca.verifier(),
            catalog: AppleTestCA.catalog, idPattern: pattern, now: now)
        let e = d.event
        #expect(e.provider == .appleNotification && e.providerEventId == "uuid-1" && e.rawType == "DID_CHANGE_RENEWAL_PREF/DOWNGRADE")
        #expect(e.kind == .productChange)
        #expect(e.intrinsicAt == Timestamp(millisecondsSinceEpoch: 1_780_000_100_000))
        #expect(e.subscriptionId == "1000" && e.tier == .pro)
        #expect(e.expiresAt == Timestamp(millisecondsSinceEpoch: 1_781_000_000_000))  // min(expires, revocation)
        #expect(e.isTrial && e.periodType == "TRIAL")
        #expect(e.priceMilli == 4990 && e.currency == "EUR")
        #expect(e.newProductId == "com.example.plus.monthly" && e.newTier == .plus && e.willRenew == false)
        #expect(d.userCandidates == [token])
        #expect(d.payload["data"]?["transactionInfo"]?["transactionId"]?.stringValue == "2000")
        #expect(d.payload["data"]?["signedTransactionInfo"] == nil)
    }

    @Test func nestedTransactionIsVerifiedToo() throws {
        let ca = try AppleTestCA.load()
        let pattern = try #require(UserIdPattern(BillingConfiguration.Users.uuidPattern))
        let outer: JSON = [
            "notificationType": "DID_RENEW", "notificationUUID": "uuid-2", "signedDate": .int(1_780_000_100_000),
            "data": [
                "bundleId": "com.example.fcgibilling", "environment": "Production", "appAppleId": 1234567,
                "signedTransactionInfo": .string(try ca.sign(AppleTestCA.transaction(), chain: "b")),
            ],
        ]
        // The nested failure carries the notification's identity (one quarantine row per notification).
        var expected = AppleVerificationError(.untrustedChain, "unable to get local issuer certificate")
        expected.notificationUUID = "uuid-2"
        expected.notificationType = "DID_RENEW"
        #expect(throws: expected) {
            _ = try AppleDelivery.notification(
                signedPayload: try ca.sign(outer), verifier: try ca.verifier(),
                catalog: AppleTestCA.catalog, idPattern: pattern, now: now)
        }
    }

    /// SPEC §19: Apple-signed data that is no notification is its own refusal (400, never
    /// quarantined); a notification failing a setting names itself.
    @Test func signedDataThatIsNoNotificationIsRefusedAsSuch() throws {
        let ca = try AppleTestCA.load()
        let v = try ca.verifier()
        for payload: JSON in [
            AppleTestCA.transaction(),
            [
                "originalTransactionId": "1", "signedDate": .int(1_780_000_000_000),
                "environment": "Production",
            ],
            ["notificationUUID": "u", "signedDate": .int(1_780_000_000_000)],
        ] {
            #expect(throws: AppleVerificationError(.notANotification, "no notificationType or notificationUUID")) {
                _ = try v.verifyNotification(try ca.sign(payload), now: now)
            }
        }
        let foreign: JSON = [
            "notificationType": "DID_RENEW", "notificationUUID": "uuid-3", "signedDate": .int(1_780_000_100_000),
            "data": ["bundleId": "com.example.other", "environment": "Production"],
        ]
        let signed = try ca.sign(foreign)
        do {
            _ = try v.verifyNotification(signed, now: now)
            Issue.record("a foreign bundle verified")
        } catch {
            #expect(error.reason == .bundleMismatch && error.isSettingMismatch)
            #expect(error.notificationUUID == "uuid-3" && error.notificationType == "DID_RENEW")
        }
    }

    @Test func kindMapping() {
        let cases: [(String, String?, EventKind)] = [
            ("SUBSCRIBED", "INITIAL_BUY", .purchase), ("SUBSCRIBED", "RESUBSCRIBE", .purchase),
            ("DID_RENEW", "BILLING_RECOVERY", .renewal), ("DID_CHANGE_RENEWAL_STATUS", "AUTO_RENEW_DISABLED", .cancellation),
            ("DID_CHANGE_RENEWAL_STATUS", "AUTO_RENEW_ENABLED", .uncancellation), ("DID_CHANGE_RENEWAL_PREF", "UPGRADE", .renewal),
            ("DID_CHANGE_RENEWAL_PREF", "DOWNGRADE", .productChange), ("DID_CHANGE_RENEWAL_PREF", nil, .productChange),
            ("DID_FAIL_TO_RENEW", "GRACE_PERIOD", .billingIssue), ("DID_FAIL_TO_RENEW", nil, .billingIssue),
            ("GRACE_PERIOD_EXPIRED", nil, .billingIssue), ("EXPIRED", "BILLING_RETRY", .expiration), ("REFUND", nil, .refund),
            ("REVOKE", nil, .revoke), ("REFUND_REVERSED", nil, .refundReversed), ("RENEWAL_EXTENDED", nil, .extension),
            ("OFFER_REDEEMED", "UPGRADE", .renewal), ("PRICE_INCREASE", "ACCEPTED", .priceIncrease), ("TEST", nil, .test),
            ("CONSUMPTION_REQUEST", nil, .consumptionRequest), ("REFUND_DECLINED", nil, .refundDeclined),
            ("RENEWAL_EXTENSION", "SUMMARY", .renewalExtension), ("RENEWAL_EXTENSION", "FAILURE", .renewalExtension),
            ("EXTERNAL_PURCHASE_TOKEN", "UNREPORTED", .externalPurchaseToken), ("ONE_TIME_CHARGE", nil, .nonRenewingPurchase),
            ("RESCIND_CONSENT", nil, .consentRescinded), ("METADATA_UPDATE", nil, .metadataUpdate), ("MIGRATION", nil, .migration),
            ("PRICE_CHANGE", nil, .priceChange), ("A_TYPE_ADDED_NEXT_YEAR", nil, .unknown),
        ]
        for (type, subtype, kind) in cases {
            #expect(AppleDelivery.notificationKind(type: type, subtype: subtype) == kind, "\(type)/\(subtype ?? "-")")
        }
    }
}
