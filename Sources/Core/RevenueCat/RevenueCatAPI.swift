/// A client of RevenueCat's REST API v1 (SPEC §15): `GET {apiUrl}/v1/subscribers/{app_user_id}`
/// with `Authorization: Bearer <secret key>`, over libcurl (TLS verified, timeouts, bounded
/// answers), with `ProviderAPIClient`'s retries. It answers CustomerInfo as RevenueCat sent
/// it (200, or 201 for a subscriber RevenueCat created on this read); the caller decodes it
/// (`RevenueCatSubscriber`).
struct RevenueCatAPI: Sendable {
    let client: ProviderAPIClient
    let baseURL: String
    /// The secret key. Never logged: errors carry statuses and codes only.
    private let apiKey: String

    init(apiKey: String, baseURL: String, client: ProviderAPIClient) {
        self.apiKey = apiKey
        self.baseURL = baseURL.hasSuffix("/") ? String(baseURL.dropLast()) : baseURL
        self.client = client
    }

    /// The client `revenuecat.*` describes; nil when no API key is configured.
    static func load(
        _ settings: BillingConfiguration.RevenueCat,
        sleep: @escaping @Sendable (Int64) -> Void = sleepMilliseconds
    ) throws(ConfigurationError) -> RevenueCatAPI? {
        guard settings.isAPIConfigured, let key = settings.apiKey else { return nil }
        let client = try ProviderAPIClient(
            settings.client, name: "revenuecat", errorCodeMember: "code", successStatuses: [200, 201],
            sleep: sleep)
        return RevenueCatAPI(apiKey: key, baseURL: settings.apiUrl, client: client)
    }

    /// The subscriber's CustomerInfo: `{request_date, request_date_ms, subscriber: {...}}`.
    func subscriber(appUserId: String) throws(ProviderAPIError) -> JSON {
        let url = baseURL + "/v1/subscribers/" + ProviderAPIClient.percentEncoded(appUserId)
        return try client.get(url) { () throws(ProviderAPIError) -> [String] in
            ["Authorization: Bearer \(apiKey)", "Accept: application/json"]
        }
    }
}
