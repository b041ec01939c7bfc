extension RPCMethodRegistry where Context: RPCContextProtocol {
    /// `google.purchases.get` (docs/googleplay.md): what the Play Developer API says of a
    /// purchase token now, for support and for checking the service account's setup; reads
    /// only. `google.purchases.acknowledge`: acknowledges it at Google if it is not yet (an
    /// operator's hand before the three days after which Google refunds it), audited. The
    /// token is the user's credential at Google: never logged, never in the audit trail (its
    /// SHA-256 prefix names it there).
    mutating func registerGooglePlayMethods(api: GooglePlayAPI?) {
        register(
            "google.purchases.acknowledge",
            summary: "Acknowledges a Google Play subscription purchase at Google unless it already is (audited)",
            params: "{purchaseToken: string, actor: string}"
        ) { request, context in
            try request.params.expectOnly("purchaseToken", "actor")
            let token = try request.params.requireString("purchaseToken", maxLength: 4096)
            let actor = try request.params.requireActor()
            guard !token.isEmpty else { throw RPCError.invalidParams("\"purchaseToken\" must not be empty", field: "purchaseToken") }
            let api = try Self.requireGooglePlay(api)
            let db = try context.requireDatabase()
            let subscription = try Self.playCall { () throws(ProviderAPIError) in try api.subscription(token: token) }
            guard let productId = subscription.lineItems.first?.productId else {
                throw BillingError(.conflict, "the purchase has no line item to acknowledge", data: ["reason": "no_line_item"])
            }
            if !subscription.acknowledged {
                try Self.playCall { () throws(ProviderAPIError) in try api.acknowledge(subscriptionId: productId, token: token) }
                try AuditLog.write(
                    actor: actor, action: "google.purchases.acknowledge",
                    detail: [
                        "packageName": .string(api.packageName), "productId": .string(productId),
                        "purchaseTokenSha256": .string(String(SHA256.hexHash(Array(token.utf8)).prefix(16))),
                    ],
                    now: context.clock.now(), on: db)
            }
            return ["acknowledged": true, "alreadyAcknowledged": .bool(subscription.acknowledged), "productId": .string(productId)]
        }
        register(
            "google.purchases.get",
            summary: "What Google Play says of a subscription purchase token now (state, access, expiry, acknowledgement, the app's user id)",
            params: "{purchaseToken: string}"
        ) { request, context in
            try request.params.expectOnly("purchaseToken")
            let token = try request.params.requireString("purchaseToken", maxLength: 4096)
            guard !token.isEmpty else { throw RPCError.invalidParams("\"purchaseToken\" must not be empty", field: "purchaseToken") }
            let api = try Self.requireGooglePlay(api)
            let subscription = try Self.playCall { () throws(ProviderAPIError) in try api.subscription(token: token) }
            var answer = subscription.json(now: context.clock.now()).objectValue ?? [:]
            answer["packageName"] = .string(api.packageName)
            return .object(answer)
        }
    }

    private static func requireGooglePlay(_ api: GooglePlayAPI?) throws(BillingError) -> GooglePlayAPI {
        guard let api else {
            throw BillingError(
                .conflict, "Google Play is not configured (google.packageName and google.serviceAccountFile)",
                data: ["reason": "not_configured"])
        }
        return api
    }

    /// A Play API call, its failures as the admin socket says them: 1001 for a token Google
    /// does not know (404, or 410 for one long expired), -32002 when the API could not be read.
    private static func playCall<T>(_ call: () throws(ProviderAPIError) -> T) throws -> T {
        do {
            return try call()
        } catch  where error.isUnknownToken {
            throw BillingError(
                .notFound, "Google Play knows no such subscription purchase token", data: ["status": .int(Int64(error.status ?? 404))])
        } catch {
            throw RPCError(
                code: RPCError.Code.unavailable, message: "the Play Developer API could not be read: \(error.code)",
                data: ["reason": "provider_unavailable", "providerError": .string(error.code)])
        }
    }
}
