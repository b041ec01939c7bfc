extension RPCMethodRegistry where Context: RPCContextProtocol {
    /// `google.purchases.get` (docs/googleplay.md): what the Play Developer API says of a
    /// purchase token now, for support and for checking the service account's setup. Reads
    /// only; the token is the user's credential at Google and is never logged.
    mutating func registerGooglePlayMethods(api: GooglePlayAPI?) {
        register(
            "google.purchases.get",
            summary: "What Google Play says of a subscription purchase token now (state, access, expiry, acknowledgement, the app's user id)",
            params: "{purchaseToken: string}"
        ) { request, context in
            try request.params.expectOnly("purchaseToken")
            let token = try request.params.requireString("purchaseToken", maxLength: 4096)
            guard !token.isEmpty else { throw RPCError.invalidParams("\"purchaseToken\" must not be empty", field: "purchaseToken") }
            guard let api else {
                throw BillingError(
                    .conflict, "Google Play is not configured (google.packageName and google.serviceAccountFile)",
                    data: ["reason": "not_configured"])
            }
            do throws(ProviderAPIError) {
                let subscription = try api.subscription(token: token)
                var answer = subscription.json(now: context.clock.now()).objectValue ?? [:]
                answer["packageName"] = .string(api.packageName)
                return .object(answer)
            } catch  where error.kind == .status && (error.status == 404 || error.status == 410) {
                // 410: Google's "purchase token is no longer valid" for long-expired tokens.
                throw BillingError(
                    .notFound, "Google Play knows no such subscription purchase token", data: ["status": .int(Int64(error.status ?? 404))])
            } catch {
                throw RPCError(
                    code: RPCError.Code.unavailable, message: "the Play Developer API could not be read: \(error.code)",
                    data: ["reason": "provider_unavailable", "providerError": .string(error.code)])
            }
        }
    }
}
