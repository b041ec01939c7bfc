import Glibc
import Testing

@testable import Core

/// Google Play's pure parts (SPEC §18): SubscriptionPurchaseV2 decoding, strict on what it
/// uses; access per state at the expiry's edge; the service account's key file and JWT.
@Suite struct GooglePlaySubscriptionTests {
    static let expiry = "2026-12-31T10:00:00.123456789Z"

    func purchase(_ state: String, _ extra: JSONObject = [:], item: JSONObject = [:]) -> JSON {
        var line: JSONObject = [
            "productId": "plus_monthly", "expiryTime": .string(Self.expiry),
            "autoRenewingPlan": ["autoRenewEnabled": true, "recurringPrice": ["currencyCode": "EUR", "units": "4", "nanos": 990_000_000]],
            "offerDetails": ["basePlanId": "monthly", "offerTags": []], "offerPhase": ["basePrice": [:]],
        ]
        for (k, v) in item { line[k] = v }
        var p: JSONObject = [
            "kind": "androidpublisher#subscriptionPurchaseV2", "subscriptionState": .string(state), "lineItems": [.object(line)],
            "startTime": "2026-12-01T10:00:00Z", "acknowledgementState": "ACKNOWLEDGEMENT_STATE_ACKNOWLEDGED",
            "externalAccountIdentifiers": ["obfuscatedExternalAccountId": "u-1"], "etag": "x", "newFieldGoogleAddsNextYear": [1, 2],
        ]
        for (k, v) in extra { p[k] = v }
        return .object(p)
    }

    @Test func everyStateGrantsAccessOnlyWherePlayDoesAndOnlyBeforeTheExpiry() throws {
        let end = Timestamp(iso8601: Self.expiry)!
        let granting: Set<GooglePlaySubscription.State> = [.active, .canceled, .inGracePeriod]
        for state in GooglePlaySubscription.State.allCases {
            let s = try GooglePlaySubscription.decode(purchase(state.rawValue))
            #expect(s.state == state)
            #expect(s.grantsAccess(at: end.adding(milliseconds: -1)) == granting.contains(state), "\(state)")
            #expect(!s.grantsAccess(at: end), "\(state): the expiry ends it")
        }
    }

    @Test func theFieldsItUsesAreRead() throws {
        let s = try GooglePlaySubscription.decode(
            purchase(
                "SUBSCRIPTION_STATE_CANCELED",
                ["testPurchase": [:], "linkedPurchaseToken": "old-token", "canceledStateContext": ["userInitiatedCancellation": [:]]],
                item: ["offerPhase": ["freeTrial": [:]], "offerDetails": ["basePlanId": "monthly", "offerId": "trial-7d"]]))
        #expect(s.expiresAt == Timestamp(iso8601: "2026-12-31T10:00:00.123Z"), "nanoseconds kept to the millisecond")
        #expect(s.lineItems.map(\.catalogProductId) == ["plus_monthly:monthly"])
        #expect(s.lineItems[0].isFreeTrial && s.lineItems[0].offerId == "trial-7d")
        #expect(s.isTest && s.acknowledged && s.willRenew)
        #expect(s.obfuscatedAccountId == "u-1" && s.linkedPurchaseToken == "old-token" && s.canceledBy == "user")
        let pending = try GooglePlaySubscription.decode(
            purchase("SUBSCRIPTION_STATE_PENDING", ["acknowledgementState": "ACKNOWLEDGEMENT_STATE_PENDING"]))
        #expect(!pending.acknowledged && !pending.isTest)
        let prepaid = try GooglePlaySubscription.decode(
            purchase("SUBSCRIPTION_STATE_ACTIVE", item: ["autoRenewingPlan": .null, "prepaidPlan": ["allowExtendAfterTime": "2026-12-30T10:00:00Z"]]))
        #expect(!prepaid.willRenew)
    }

    @Test func whatItUsesIsCheckedStrictly() {
        for bad in [
            purchase("SUBSCRIPTION_STATE_SOMETHING_NEW"), purchase("SUBSCRIPTION_STATE_ACTIVE", ["subscriptionState": 3]),
            purchase("SUBSCRIPTION_STATE_ACTIVE", ["lineItems": "x"]), purchase("SUBSCRIPTION_STATE_ACTIVE", item: ["expiryTime": "soon"]),
            purchase("SUBSCRIPTION_STATE_ACTIVE", item: ["productId": 5]), purchase("SUBSCRIPTION_STATE_ACTIVE", item: ["offerPhase": "freeTrial"]),
            purchase("SUBSCRIPTION_STATE_ACTIVE", ["externalAccountIdentifiers": ["obfuscatedExternalAccountId": 7]]),
            ["lineItems": []],
        ] as [JSON] {
            #expect(throws: PayloadError.self) { _ = try GooglePlaySubscription.decode(bad) }
        }
    }
}

@Suite struct GoogleServiceAccountTests {
    func keyFile(_ document: JSONObject) -> String {
        let path = "/tmp/fcgibilling-google-\(getpid())-\(UInt32.random(in: 0...UInt32.max)).json"
        let text = JSON.object(document).serializedString()
        let fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0o600)
        _ = text.withCString { Glibc.write(fd, $0, strlen($0)) }
        close(fd)
        return path
    }

    func google(_ path: String) -> BillingConfiguration.Google {
        var g = BillingConfiguration.Google()
        g.packageName = "com.example.app"
        g.serviceAccountFile = path
        g.tokenUrl = "https://oauth2.test/token"
        return g
    }

    @Test func theJWTIsGooglesJWTBearerAssertion() throws {
        let key = try PrivateKey.generateRSA()
        let path = keyFile([
            "type": "service_account", "client_email": "reader@p.iam.gserviceaccount.com", "private_key": .string(try key.pem()),
            "private_key_id": "abc123", "token_uri": "https://oauth2.googleapis.com/token",
        ])
        defer { unlink(path) }
        let account = try #require(try GoogleServiceAccount.load(google(path)))
        let now = Timestamp(millisecondsSinceEpoch: 1_800_000_000_999)
        let jws = try CompactJWS.parse(try account.assertion(now: now))
        #expect(jws.header == ["alg": "RS256", "typ": "JWT", "kid": "abc123"])
        #expect(
            jws.payload == [
                "iss": "reader@p.iam.gserviceaccount.com", "scope": "https://www.googleapis.com/auth/androidpublisher",
                "aud": "https://oauth2.test/token", "iat": .int(1_800_000_000), "exp": .int(1_800_003_600),
            ], "aud is the configured token URL, which the grant is posted to")
        #expect(try key.publicKey.verifySHA256(signature: jws.signature, message: jws.signingInput))
    }

    @Test func aFileThatIsNoServiceAccountKeyIsAStartUpErrorThatNeverQuotesTheKey() throws {
        let ec = try PrivateKey.generateEC().pem()
        for (document, message) in [
            (["type": "authorized_user", "client_email": "a", "private_key": .string(ec)] as JSONObject, "service account"),
            (["type": "service_account", "private_key": .string(ec)], "service account"),
            (["type": "service_account", "client_email": "a", "private_key": .string(ec)], "not an RSA key"),
            (
                ["type": "service_account", "client_email": "a", "private_key": "-----BEGIN PRIVATE KEY-----\nAAAA\n-----END PRIVATE KEY-----"],
                "not a PEM private key"
            ),
        ] {
            let path = keyFile(document)
            defer { unlink(path) }
            #expect {
                _ = try GoogleServiceAccount.load(google(path))
            } throws: { error in
                "\(error)".contains(message) && !"\(error)".contains("BEGIN")
            }
        }
        #expect(throws: ConfigurationError.self) { _ = try GoogleServiceAccount.load(google("/nonexistent/key.json")) }
        #expect(try GoogleServiceAccount.load(BillingConfiguration.Google()) == nil)
    }

    @Test func theConfigurationKeys() throws {
        let c = try BillingConfiguration(json: [
            "google": [
                "packageName": "com.example.app", "serviceAccountFile": "/etc/fcgibilling/google.json",
                "pushAudience": "https://billing.example.com/api/v1/billing/webhooks/google", "timeoutSeconds": 7,
            ]
        ])
        #expect(c.google.isAPIConfigured && c.google.client.timeoutSeconds == 7)
        #expect(c.google.apiUrl == "https://androidpublisher.googleapis.com")
        for bad: JSON in [
            ["google": ["packageName": "com.example.app"]], ["google": ["apiUrl": "http://plain"]],
            ["google": ["packageName": "com example", "serviceAccountFile": "/k"]], ["google": ["package": "x"]],
        ] {
            #expect(throws: ConfigurationError.self) { _ = try BillingConfiguration(json: bad) }
        }
    }
}
