/// A client of the Google Play Developer API (androidpublisher v3, SPEC §18), with the service
/// account's access token and `ProviderAPIClient`'s retries (5xx and transport back off, 429
/// waits its Retry-After): `purchases.subscriptionsv2.get` and
/// `purchases.subscriptions.acknowledge`. A 401 drops the cached access token and tries once
/// more with a new one (a token Google revoked early).
struct GooglePlayAPI: Sendable {
    let client: ProviderAPIClient
    let baseURL: String
    let packageName: String
    let account: GoogleServiceAccount
    let clock: any BillingClock

    /// The client `google.*` describes; nil without `packageName` and `serviceAccountFile`.
    static func load(_ google: BillingConfiguration.Google, clock: any BillingClock = SystemClock()) throws(ConfigurationError) -> GooglePlayAPI? {
        guard google.isAPIConfigured, let packageName = google.packageName else { return nil }
        // Google's error body is `{"error": {"code": 404, "message", "status"}}`: the HTTP status says it.
        let client = try ProviderAPIClient(google.client, name: "google", errorCodeMember: "code")
        guard let account = try GoogleServiceAccount.load(google, http: client.http) else { return nil }
        let base = google.apiUrl.hasSuffix("/") ? String(google.apiUrl.dropLast()) : google.apiUrl
        return GooglePlayAPI(client: client, baseURL: base, packageName: packageName, account: account, clock: clock)
    }

    private var applicationURL: String {
        baseURL + "/androidpublisher/v3/applications/" + ProviderAPIClient.percentEncoded(packageName)
    }

    /// `GET …/purchases/subscriptionsv2/tokens/{token}`, decoded.
    func subscription(token: String) throws(ProviderAPIError) -> GooglePlaySubscription {
        let url = applicationURL + "/purchases/subscriptionsv2/tokens/" + ProviderAPIClient.percentEncoded(token)
        let json = try authorized { () throws(ProviderAPIError) -> JSON in try client.get(url, headers: headers) }
        do { return try GooglePlaySubscription.decode(json) } catch {
            throw ProviderAPIError(.malformedResponse, status: 200, detail: "SubscriptionPurchaseV2: \(error)")
        }
    }

    /// `GET …/purchases/productsv2/tokens/{token}`: a one-time product purchase, decoded.
    func productPurchase(token: String) throws(ProviderAPIError) -> GooglePlayProductPurchase {
        let url = applicationURL + "/purchases/productsv2/tokens/" + ProviderAPIClient.percentEncoded(token)
        let json = try authorized { () throws(ProviderAPIError) -> JSON in try client.get(url, headers: headers) }
        do { return try GooglePlayProductPurchase.decode(json) } catch {
            throw ProviderAPIError(.malformedResponse, status: 200, detail: "ProductPurchaseV2: \(error)")
        }
    }

    /// `POST …/purchases/products/{productId}/tokens/{token}:acknowledge`: a one-time product's.
    func acknowledgeProduct(productId: String, token: String) throws(ProviderAPIError) {
        let url =
            applicationURL + "/purchases/products/" + ProviderAPIClient.percentEncoded(productId) + "/tokens/"
            + ProviderAPIClient.percentEncoded(token) + ":acknowledge"
        _ = try authorized { () throws(ProviderAPIError) -> JSON in try client.post(url, body: [:], headers: headers) }
    }

    /// `GET …/purchases/voidedpurchases?type=1&startTime=…`: one page of the purchases
    /// (subscriptions and one-time products) voided since `since`, and the next page's token.
    func voidedPurchases(since: Timestamp, pageToken: String?) throws(ProviderAPIError) -> (
        purchases: [GooglePlayVoidedPurchase], nextPageToken: String?
    ) {
        var url = applicationURL + "/purchases/voidedpurchases?type=1&maxResults=1000&startTime=\(since.millisecondsSinceEpoch)"
        if let pageToken { url += "&token=" + ProviderAPIClient.percentEncoded(pageToken) }
        let json = try authorized { () throws(ProviderAPIError) -> JSON in try client.get(url, headers: headers) }
        do {
            let r = try PayloadReader(json, path: "")
            guard let items = r.value("voidedPurchases")?.arrayValue ?? (r.value("voidedPurchases") == nil ? [] : nil) else {
                throw PayloadError("voidedPurchases", "expected an array")
            }
            let purchases = try items.enumerated().map { (index, item) throws(PayloadError) in
                try GooglePlayVoidedPurchase.decode(item, path: "voidedPurchases[\(index)]")
            }
            let next =
                try r.value("tokenPagination").map { (v) throws(PayloadError) in
                    try PayloadReader(v, path: "tokenPagination").string("nextPageToken", maxLength: 1024)
                } ?? nil
            return (purchases, next.flatMap { $0.isEmpty ? nil : $0 })
        } catch {
            throw ProviderAPIError(.malformedResponse, status: 200, detail: "VoidedPurchasesListResponse: \(error)")
        }
    }

    /// The token's state, of the kind the caller knows it is.
    func read(token: String, kind: GooglePlayRead.Kind) throws(ProviderAPIError) -> GooglePlayRead {
        switch kind {
        case .subscription: return GooglePlayRead(try subscription(token: token))
        case .product: return GooglePlayRead(try productPurchase(token: token))
        }
    }

    /// `POST …/purchases/subscriptions/{subscriptionId}/tokens/{token}:acknowledge` (an empty
    /// 200). Google refunds a subscription left unacknowledged for three days.
    func acknowledge(subscriptionId: String, token: String) throws(ProviderAPIError) {
        let url =
            applicationURL + "/purchases/subscriptions/" + ProviderAPIClient.percentEncoded(subscriptionId) + "/tokens/"
            + ProviderAPIClient.percentEncoded(token) + ":acknowledge"
        _ = try authorized { () throws(ProviderAPIError) -> JSON in try client.post(url, body: [:], headers: headers) }
    }

    private func headers() throws(ProviderAPIError) -> [String] {
        ["Authorization: Bearer " + (try account.accessToken(now: clock.now())), "Accept: application/json"]
    }

    private func authorized(_ call: () throws(ProviderAPIError) -> JSON) throws(ProviderAPIError) -> JSON {
        do {
            return try call()
        } catch  where error.kind == .status && error.status == 401 {
            account.invalidate()
            return try call()
        }
    }
}
