import Glibc

/// A client of Apple's App Store Server API (SPEC §11): Get All Subscription Statuses
/// (`GET /inApps/v1/subscriptions/{transactionId}`) and Get Transaction History v2
/// (`GET /inApps/v2/history/{transactionId}`, paged by `revision`), over libcurl, each call
/// with a fresh ES256 token, a timeout, retries with backoff and jitter on 5xx and
/// timeouts, and 429 honouring `Retry-After`. It returns Apple's JSON as is: the signed
/// data inside is verified by the caller (`Reconciler`), never trusted here.
struct AppStoreServerAPI: Sendable {
    enum Environment: String, Sendable, CaseIterable {
        case production = "Production", sandbox = "Sandbox"
    }

    let token: AppStoreServerAPIToken
    let client: ProviderAPIClient
    let productionURL: String
    let sandboxURL: String
    let clock: any BillingClock

    init(
        token: AppStoreServerAPIToken, client: ProviderAPIClient, productionURL: String, sandboxURL: String,
        clock: any BillingClock = SystemClock()
    ) {
        self.token = token
        self.client = client
        self.productionURL = productionURL.hasSuffix("/") ? String(productionURL.dropLast()) : productionURL
        self.sandboxURL = sandboxURL.hasSuffix("/") ? String(sandboxURL.dropLast()) : sandboxURL
        self.clock = clock
    }

    /// The client `apple.serverApi.*` describes; nil when no key is configured.
    static func load(_ apple: BillingConfiguration.Apple, clock: any BillingClock) throws(ConfigurationError) -> AppStoreServerAPI? {
        let api = apple.serverApi
        guard api.isConfigured, let issuerId = api.issuerId, let keyId = api.keyId, let pem = api.privateKey else { return nil }
        guard let bundleId = apple.bundleId, !bundleId.isEmpty else {
            throw ConfigurationError("apple.serverApi needs apple.bundleId (the token's bid claim)")
        }
        let client = try ProviderAPIClient(api.client, name: "apple.serverApi", errorCodeMember: "errorCode")
        let token = try AppStoreServerAPIToken(
            issuerId: issuerId, keyId: keyId, bundleId: bundleId, privateKeyPEM: pem,
            lifetimeSeconds: api.tokenLifetimeSeconds)
        return AppStoreServerAPI(
            token: token, client: client, productionURL: api.productionUrl, sandboxURL: api.sandboxUrl,
            clock: clock)
    }

    func baseURL(_ environment: Environment) -> String {
        environment == .production ? productionURL : sandboxURL
    }

    /// Get All Subscription Statuses: `{environment, bundleId, data: [{subscriptionGroupIdentifier,
    /// lastTransactions: [{status, originalTransactionId, signedTransactionInfo, signedRenewalInfo}]}]}`.
    func allSubscriptionStatuses(transactionId: String, environment: Environment) throws(ProviderAPIError) -> JSON {
        try call(baseURL(environment) + "/inApps/v1/subscriptions/" + Self.pathSegment(transactionId))
    }

    /// One page of Get Transaction History v2, oldest first: `{revision, hasMore, bundleId,
    /// environment, signedTransactions: [JWS]}`. `revision` is the previous page's.
    func transactionHistory(transactionId: String, revision: String?, environment: Environment) throws(ProviderAPIError) -> JSON {
        var url = baseURL(environment) + "/inApps/v2/history/" + Self.pathSegment(transactionId) + "?sort=ASCENDING"
        if let revision { url += "&revision=" + Self.queryValue(revision) }
        return try call(url)
    }

    /// One GET with a fresh token per attempt and the retry rules of `ProviderAPIClient`.
    func call(_ url: String) throws(ProviderAPIError) -> JSON {
        try client.get(url) { () throws(ProviderAPIError) -> [String] in
            let bearer: String
            do { bearer = try token.make(now: clock.now()) } catch { throw ProviderAPIError(.signing, detail: "\(error)") }
            return ["Authorization: Bearer \(bearer)", "Accept: application/json"]
        }
    }

    /// Transaction ids are digits; anything else is percent-encoded rather than trusted in a URL.
    static func pathSegment(_ value: String) -> String { ProviderAPIClient.percentEncoded(value) }

    static func queryValue(_ value: String) -> String { ProviderAPIClient.percentEncoded(value) }
}

extension ProviderAPIError {
    /// Apple's "transaction id not found" (404, errorCode 4040010): in Production, the
    /// transaction may be a sandbox one.
    var isTransactionNotFound: Bool { status == 404 && (errorCode == nil || errorCode == 4_040_010) }
}
