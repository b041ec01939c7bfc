import Testing

@testable import Core

/// The parameter types `system.listMethods` declares (billing-admin converts `--name value`
/// by them), read off every method's params line.
@Suite struct RPCParamTypesTests {
    func types(_ help: String) -> [String: String] {
        Dictionary(uniqueKeysWithValues: RPCParamType.parse(help).map { ($0.name, $0.type.description) })
    }

    @Test func membersAndTheirTypes() {
        #expect(
            types(
                "{userId, tier: plus|pro, startsAt?: ISO-8601 (default now), expiresAt?: ISO-8601 (absent = permanent), reason, campaign?, idempotencyKey, actor}"
            )
                == [
                    "userId": "string", "tier": "string", "startsAt": "string", "expiresAt": "string", "reason": "string",
                    "campaign": "string", "idempotencyKey": "string", "actor": "string",
                ])
        #expect(types("{grantId: integer, actor, reason}") == ["grantId": "integer", "actor": "string", "reason": "string"])
        #expect(
            types("{campaign, tier: plus|pro, userIds: [id] (at most 1000), expiresAt?, reason, actor, dryRun?: bool}")["userIds"] == "array<string>")
        #expect(types("{campaign, tier: plus|pro, userIds: [id] (at most 1000), expiresAt?, reason, actor, dryRun?: bool}")["dryRun"] == "boolean")
        #expect(
            types(
                "{ids?: [integer] | all?: true, afterId?: integer (with all: open rows after this id, to page), limit?: 1..1000 (100), actor} → {results}"
            )
                == ["ids": "array<integer>", "all": "boolean", "afterId": "integer", "limit": "integer", "actor": "string"])
        #expect(
            types(
                "{userId?, provider?: revenuecat|apple_notification|apple_transaction, status?: applied|unmatched|ignored|failed, cursor?: integer, limit?: 1..1000 (50)}"
            )
                == ["userId": "string", "provider": "string", "status": "string", "cursor": "integer", "limit": "integer"])
        #expect(
            types("{userId | originalTransactionId (string, or the digits as a number), actor}")
                == ["userId": "string", "originalTransactionId": "string", "actor": "string"])
        #expect(
            types("{enforcement?: observe|enforce, \"purchases.enabled\"?: boolean, actor} (at least one flag)")
                == ["enforcement": "string", "purchases.enabled": "boolean", "actor": "string"])
        #expect(
            types("{contract: object, actor: string, effectiveAt?: ISO-8601 (default now, never in the past)}")
                == ["contract": "object", "actor": "string", "effectiveAt": "string"])
        #expect(types("{users: [{id, createdAt: ISO-8601}] (at most 10000), actor}") == ["users": "array<object>", "actor": "string"])
        #expect(
            types("{from: ISO-8601, to: ISO-8601, environment: \"production\"|\"sandbox\", currency?: ISO 4217 (default reporting.currency)}")
                == ["from": "string", "to": "string", "environment": "string", "currency": "string"])
        #expect(types("{limit?: 1..1000000 rows (default 100000), actor}") == ["limit": "integer", "actor": "string"])
        #expect(types("none").isEmpty)
        #expect(types("{}").isEmpty)
    }

    @Test func everyRegisteredMethodDeclaresItsParams() {
        let registry = BillingRPCMethods.makeRegistry(services: .unconfigured())
        for method in registry.methods where method.paramsHelp != "none" && method.paramsHelp != "{}" {
            #expect(!RPCParamType.parse(method.paramsHelp).isEmpty, "\(method.name): \(method.paramsHelp)")
        }
        let typed = Dictionary(uniqueKeysWithValues: registry.methods.map { ($0.name, types($0.paramsHelp)) })
        #expect(typed["grants.create"]?["idempotencyKey"] == "string")
        #expect(typed["grants.revoke"]?["grantId"] == "integer")
        #expect(typed["grandfather.applyCohort"]?["dryRun"] == "boolean")
        #expect(typed["grandfather.applyCohort"]?["batchSize"] == "integer")
    }
}
