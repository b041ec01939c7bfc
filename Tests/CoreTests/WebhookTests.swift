import Testing

@testable import Core

/// Outbound webhooks without a network: the Standard Webhooks signature (the specification's
/// own test vector), the retry schedule's promises, the body, and `webhooks.*` configuration.
@Suite struct WebhookTests {
    @Test func signsTheStandardWebhooksTestVector() throws {
        // standard-webhooks/standard-webhooks, libraries' shared test case.
        let signer = try #require(WebhookSignature(secret: "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"))
        let signature = try signer.signature(
            id: "msg_p5jXN8AQM9LWM0D4loKWxJek", timestamp: 1_614_265_330, body: Array(#"{"test": 2432232314}"#.utf8))
        #expect(signature == "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=")
    }

    @Test func refusesSecretsThatAreNotWhsecAndEnoughBase64Bytes() throws {
        for secret in [
            "", "MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw", "whsec_", "whsec_not base64!", "whsec_" + Base64.encode([UInt8](repeating: 7, count: 16)),
        ] {
            #expect(WebhookSignature(secret: secret) == nil, "\(secret)")
        }
        let generated = try WebhookSignature.generateSecret()
        #expect(generated.hasPrefix("whsec_"))
        #expect(WebhookSignature(secret: generated) != nil)
    }

    @Test func anEndpointBackWithinAMinuteIsTriedAgainWithinSecondsOfItsReturn() {
        let made = Timestamp(secondsSinceEpoch: 1_700_000_000)
        var now = made
        var attempts: [Int64] = [0]
        var failures = 0
        while let next = WebhookRetryPolicy.nextAttempt(afterFailures: failures + 1, now: now, since: made) {
            failures += 1
            now = next
            attempts.append((now.millisecondsSinceEpoch - made.millisecondsSinceEpoch) / 1000)
        }
        // Attempts at most 15 s apart through the first minute: an endpoint down for less
        // than a minute is served within 15 s of its return.
        let early = attempts.filter { $0 <= 60 }
        #expect(zip(early, early.dropFirst()).allSatisfy { $1 - $0 <= 15 }, "\(early)")
        #expect(early.last ?? 0 >= 60)
        // Then minutes, then hours, never more than 8 h apart, ending three days after.
        #expect(zip(attempts, attempts.dropFirst()).allSatisfy { $1 > $0 && $1 - $0 <= 28_800 })
        #expect(attempts.last! <= 3 * 86_400 && attempts.last! > 3 * 86_400 - 28_800, "\(attempts)")
        #expect(failures < 40)
    }

    @Test func theBodyIsTypeTimestampAndData() throws {
        let body = WebhookDispatcher.body(
            type: "access.changed", changedAt: Timestamp(secondsSinceEpoch: 1_700_000_000), data: ["userId": "u", "revision": 3])
        let parsed = try JSON.parse(body)
        #expect(parsed["type"] == "access.changed")
        #expect(parsed["timestamp"] == "2023-11-14T22:13:20.000Z")
        #expect(parsed["data"]?["revision"] == 3)
    }

    @Test func theOutboxTypesAreTheOnesEndpointsSubscribeTo() {
        #expect(AccessOutbox.RowType.allCases.map(\.rawValue) == BillingConfiguration.Webhooks.eventTypes)
    }

    @Test func decodesEndpointsAndSaysWhatIsWrongWithEachOne() throws {
        let secret = "whsec_" + Base64.encode([UInt8](repeating: 1, count: 32))
        let config = try BillingConfiguration(json: [
            "webhooks": [
                "endpoints": [
                    ["id": "crm", "url": "https://crm.example/hooks", "secret": .string(secret), "events": ["access.changed"]],
                    ["id": "all", "url": "https://all.example/", "secret": .string(secret)],
                ],
                "timeoutSeconds": 5, "caFile": "/etc/ssl/ca.pem", "retentionDays": 10,
            ]
        ])
        #expect(config.webhooks.endpoints.map(\.id) == ["crm", "all"])
        #expect(config.webhooks.endpoints[0].events == ["access.changed"])
        #expect(config.webhooks.endpoints[1].events == ["access.changed", "event.applied"])
        #expect(config.webhooks.client.timeoutSeconds == 5)
        #expect(config.webhooks.client.caFile == "/etc/ssl/ca.pem")
        #expect(config.webhooks.retentionDays == 10)
        #expect(!config.description.contains(secret))

        do {
            _ = try BillingConfiguration(json: [
                "webhooks": [
                    "endpoints": [
                        ["id": "Bad Id", "url": "http://plain.example", "secret": "whsec_short", "events": ["access.deleted"]],
                        ["id": "dup", "url": "https://a.example", "secret": .string(secret)],
                        ["id": "dup", "url": "https://b.example", "secretFile": nil, "color": "blue"],
                    ]
                ]
            ])
            Issue.record("accepted")
        } catch {
            let text = error.description
            for expected in [
                "webhooks.endpoints[0].id", "webhooks.endpoints[0].url", "webhooks.endpoints[0].secret", "webhooks.endpoints[0].events",
                "webhooks.endpoints[2].id", "webhooks.endpoints[2].secretFile", "webhooks.endpoints[2].color: unknown key",
            ] {
                #expect(text.contains(expected), "\(expected) in \(text)")
            }
            #expect(!text.contains("endpoints[1]"), "\(text)")
        }
    }
}
