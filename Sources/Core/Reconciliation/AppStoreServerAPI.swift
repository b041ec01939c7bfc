import Glibc

/// Why a call to the App Store Server API gave nothing usable. Carries no token, header or
/// payload (logs and metrics read it).
struct AppStoreAPIError: Error, Sendable, Equatable, CustomStringConvertible {
    enum Kind: String, Sendable {
        /// Apple answered this HTTP status (with its `errorCode` when the body had one).
        case status
        /// 429 with a Retry-After longer than this process waits inside one call.
        case rateLimited = "rate_limited"
        /// No HTTP answer: timeout, connection, TLS.
        case transport
        /// An answer that is not the documented JSON shape.
        case malformedResponse = "malformed_response"
        /// Signed data in the answer that the verifier refused.
        case verification
        /// The token could not be signed.
        case signing
    }

    var kind: Kind
    var status: Int?
    var errorCode: Int64?
    /// Seconds Apple asked us to wait (429).
    var retryAfterSeconds: Int?
    var detail: String

    init(_ kind: Kind, status: Int? = nil, errorCode: Int64? = nil, retryAfterSeconds: Int? = nil, detail: String = "") {
        self.kind = kind
        self.status = status
        self.errorCode = errorCode
        self.retryAfterSeconds = retryAfterSeconds
        self.detail = detail
    }

    /// Apple's "transaction id not found" (404, errorCode 4040010): in Production, the
    /// transaction may be a sandbox one.
    var isTransactionNotFound: Bool { status == 404 && (errorCode == nil || errorCode == 4_040_010) }

    /// The label `billing_reconcile_api_errors_total{status}` counts it under.
    var statusLabel: String {
        switch kind {
        case .status, .rateLimited: return status.map(String.init) ?? "unknown"
        case .transport: return detail.hasPrefix("timeout") ? "timeout" : "transport"
        case .malformedResponse: return "malformed"
        case .verification: return "verification"
        case .signing: return "signing"
        }
    }

    var description: String {
        var text = kind.rawValue
        if let status { text += " \(status)" }
        if let errorCode { text += " errorCode \(errorCode)" }
        if let retryAfterSeconds { text += " retry-after \(retryAfterSeconds)s" }
        if !detail.isEmpty { text += ": \(detail)" }
        return text
    }
}

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
    let http: CurlHTTPClient
    let productionURL: String
    let sandboxURL: String
    let maxAttempts: Int
    let maxRetryAfterSeconds: Int
    let backoff: RetrySchedule
    let clock: any BillingClock
    /// Waits between attempts; tests of the schedule need no real sleep.
    let sleep: @Sendable (Int64) -> Void

    init(token: AppStoreServerAPIToken, http: CurlHTTPClient, productionURL: String, sandboxURL: String,
         maxAttempts: Int, maxRetryAfterSeconds: Int, backoff: RetrySchedule = RetrySchedule(baseMilliseconds: 500, capMilliseconds: 8000),
         clock: any BillingClock = SystemClock(), sleep: @escaping @Sendable (Int64) -> Void = AppStoreServerAPI.sleep) {
        self.token = token
        self.http = http
        self.productionURL = productionURL.hasSuffix("/") ? String(productionURL.dropLast()) : productionURL
        self.sandboxURL = sandboxURL.hasSuffix("/") ? String(sandboxURL.dropLast()) : sandboxURL
        self.maxAttempts = max(1, maxAttempts)
        self.maxRetryAfterSeconds = maxRetryAfterSeconds
        self.backoff = backoff
        self.clock = clock
        self.sleep = sleep
    }

    /// The client `apple.serverApi.*` describes; nil when no key is configured.
    static func load(_ apple: BillingConfiguration.Apple, clock: any BillingClock) throws(ConfigurationError) -> AppStoreServerAPI? {
        let api = apple.serverApi
        guard api.isConfigured, let issuerId = api.issuerId, let keyId = api.keyId, let pem = api.privateKey else { return nil }
        guard let bundleId = apple.bundleId, !bundleId.isEmpty else {
            throw ConfigurationError("apple.serverApi needs apple.bundleId (the token's bid claim)")
        }
        if let caFile = api.caFile, !FileIO.exists(caFile) { throw ConfigurationError("apple.serverApi.caFile: \(caFile) does not exist") }
        let token = try AppStoreServerAPIToken(issuerId: issuerId, keyId: keyId, bundleId: bundleId, privateKeyPEM: pem,
                                               lifetimeSeconds: api.tokenLifetimeSeconds)
        let http = CurlHTTPClient(timeoutMilliseconds: api.timeoutSeconds * 1000,
                                  connectTimeoutMilliseconds: api.connectTimeoutSeconds * 1000, caFile: api.caFile)
        return AppStoreServerAPI(token: token, http: http, productionURL: api.productionUrl, sandboxURL: api.sandboxUrl,
                                 maxAttempts: api.maxAttempts, maxRetryAfterSeconds: api.maxRetryAfterSeconds, clock: clock)
    }

    static func sleep(_ milliseconds: Int64) {
        guard milliseconds > 0 else { return }
        var request = timespec(tv_sec: Int(milliseconds / 1000), tv_nsec: Int(milliseconds % 1000) * 1_000_000)
        var remaining = timespec()
        while nanosleep(&request, &remaining) != 0 && errno == EINTR { request = remaining }
    }

    func baseURL(_ environment: Environment) -> String {
        environment == .production ? productionURL : sandboxURL
    }

    /// Get All Subscription Statuses: `{environment, bundleId, data: [{subscriptionGroupIdentifier,
    /// lastTransactions: [{status, originalTransactionId, signedTransactionInfo, signedRenewalInfo}]}]}`.
    func allSubscriptionStatuses(transactionId: String, environment: Environment) throws(AppStoreAPIError) -> JSON {
        try call(baseURL(environment) + "/inApps/v1/subscriptions/" + Self.pathSegment(transactionId))
    }

    /// One page of Get Transaction History v2, oldest first: `{revision, hasMore, bundleId,
    /// environment, signedTransactions: [JWS]}`. `revision` is the previous page's.
    func transactionHistory(transactionId: String, revision: String?, environment: Environment) throws(AppStoreAPIError) -> JSON {
        var url = baseURL(environment) + "/inApps/v2/history/" + Self.pathSegment(transactionId) + "?sort=ASCENDING"
        if let revision { url += "&revision=" + Self.queryValue(revision) }
        return try call(url)
    }

    /// One GET with retries: 5xx and transport failures back off (`backoff`, jitter) up to
    /// `maxAttempts`; 429 waits `Retry-After` when it is at most `maxRetryAfterSeconds`
    /// (else the call fails with `.rateLimited` and the caller waits that long); any other
    /// status ends the call.
    func call(_ url: String) throws(AppStoreAPIError) -> JSON {
        var attempt = 0
        while true {
            attempt += 1
            switch try once(url, attempt: attempt) {
            case .success(let json):
                return json
            case .failure(let retry):
                guard attempt < maxAttempts else { throw retry.error }
                sleep(retry.waitMilliseconds)
            }
        }
    }

    /// A failure worth another attempt, after a wait.
    struct Retry: Error {
        var error: AppStoreAPIError
        var waitMilliseconds: Int64
    }

    /// One attempt: Apple's JSON, a `Retry`, or (thrown) a failure that ends the call.
    private func once(_ url: String, attempt: Int) throws(AppStoreAPIError) -> Result<JSON, Retry> {
        let bearer: String
        do { bearer = try token.make(now: clock.now()) } catch { throw AppStoreAPIError(.signing, detail: "\(error)") }
        let response: HTTPClientResponse
        do {
            response = try http.get(url, headers: ["Authorization: Bearer \(bearer)", "Accept: application/json"])
        } catch {
            return .failure(Retry(error: AppStoreAPIError(.transport, detail: (error.isTimeout ? "timeout: " : "") + error.message),
                                  waitMilliseconds: backoff.randomDelay(attempt: attempt)))
        }
        switch response.status {
        case 200:
            guard let json = try? JSON.parse(response.body), json.objectValue != nil else {
                throw AppStoreAPIError(.malformedResponse, status: 200, detail: "not a JSON object")
            }
            return .success(json)
        case 429:
            let retryAfter = response.retryAfterSeconds ?? 1
            let limited = AppStoreAPIError(.rateLimited, status: 429, errorCode: Self.errorCode(response.body),
                                           retryAfterSeconds: retryAfter)
            guard retryAfter <= maxRetryAfterSeconds else { throw limited }
            return .failure(Retry(error: limited, waitMilliseconds: Int64(retryAfter) * 1000))
        case 500...599:
            return .failure(Retry(error: AppStoreAPIError(.status, status: response.status, errorCode: Self.errorCode(response.body)),
                                  waitMilliseconds: backoff.randomDelay(attempt: attempt)))
        default:
            throw AppStoreAPIError(.status, status: response.status, errorCode: Self.errorCode(response.body))
        }
    }

    /// Apple's `errorCode` in an error body, when there is one.
    static func errorCode(_ body: [UInt8]) -> Int64? {
        guard !body.isEmpty, let json = try? JSON.parse(body) else { return nil }
        return json["errorCode"]?.int64Value
    }

    /// Transaction ids are digits; anything else is percent-encoded rather than trusted in a URL.
    static func pathSegment(_ value: String) -> String { queryValue(value) }

    static func queryValue(_ value: String) -> String {
        var out = ""
        for byte in value.utf8 {
            switch byte {
            case UInt8(ascii: "0")...UInt8(ascii: "9"), UInt8(ascii: "A")...UInt8(ascii: "Z"), UInt8(ascii: "a")...UInt8(ascii: "z"),
                 UInt8(ascii: "-"), UInt8(ascii: "_"), UInt8(ascii: "."), UInt8(ascii: "~"):
                out.unicodeScalars.append(Unicode.Scalar(byte))
            default:
                out += "%" + String(byte, radix: 16, uppercase: true).leftPadded(to: 2)
            }
        }
        return out
    }
}

private extension String {
    func leftPadded(to width: Int) -> String { count >= width ? self : String(repeating: "0", count: width - count) + self }
}
