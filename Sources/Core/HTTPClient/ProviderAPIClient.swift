/// A provider's REST API as the pulls call it (SPEC §11, §15): one GET over libcurl with
/// the one set of retry rules — 5xx and transport failures back off (`backoff`, jitter) up to
/// `maxAttempts`; a 429 waits its Retry-After (or the body's `backoff_ms`) when that is at
/// most `maxRetryAfterSeconds`, else the call fails with `.rateLimited` and the caller waits
/// that long; any other status ends the call. Returns the provider's JSON object as is.
struct ProviderAPIClient: Sendable {
    let http: CurlHTTPClient
    let maxAttempts: Int
    let maxRetryAfterSeconds: Int
    let backoff: RetrySchedule
    /// The member of an error body holding the provider's own code (`errorCode` for Apple,
    /// `code` for RevenueCat).
    let errorCodeMember: String
    /// Statuses that carry the answer: 200, and for RevenueCat 201 (a subscriber it created
    /// on this very read).
    let successStatuses: Set<Int>
    /// Waits between attempts; tests of the schedule need no real sleep.
    let sleep: @Sendable (Int64) -> Void

    init(
        http: CurlHTTPClient, maxAttempts: Int, maxRetryAfterSeconds: Int,
        backoff: RetrySchedule = RetrySchedule(baseMilliseconds: 500, capMilliseconds: 8000),
        errorCodeMember: String, successStatuses: Set<Int> = [200],
        sleep: @escaping @Sendable (Int64) -> Void = sleepMilliseconds
    ) {
        self.http = http
        self.maxAttempts = max(1, maxAttempts)
        self.maxRetryAfterSeconds = maxRetryAfterSeconds
        self.backoff = backoff
        self.errorCodeMember = errorCodeMember
        self.successStatuses = successStatuses
        self.sleep = sleep
    }

    /// The client `settings` describe (a missing `caFile` is a start-up error). `name` is the
    /// settings' section, for that error.
    init(
        _ settings: BillingConfiguration.APIClientSettings, name: String, errorCodeMember: String, successStatuses: Set<Int> = [200],
        sleep: @escaping @Sendable (Int64) -> Void = sleepMilliseconds
    ) throws(ConfigurationError) {
        if let caFile = settings.caFile, !FileIO.exists(caFile) { throw ConfigurationError("\(name).caFile: \(caFile) does not exist") }
        let http = CurlHTTPClient(
            timeoutMilliseconds: settings.timeoutSeconds * 1000,
            connectTimeoutMilliseconds: settings.connectTimeoutSeconds * 1000, caFile: settings.caFile)
        self.init(
            http: http, maxAttempts: settings.maxAttempts, maxRetryAfterSeconds: settings.maxRetryAfterSeconds,
            errorCodeMember: errorCodeMember, successStatuses: successStatuses, sleep: sleep)
    }

    /// GET `url`; `headers` is asked once per attempt (a fresh token each time).
    func get(_ url: String, headers: () throws(ProviderAPIError) -> [String]) throws(ProviderAPIError) -> JSON {
        try call(url, body: nil, headers: headers)
    }

    /// POST `body` (JSON) to `url` with the same retries; an empty 2xx answer is `{}` (Google
    /// Play's acknowledge answers so).
    func post(_ url: String, body: JSON, headers: () throws(ProviderAPIError) -> [String]) throws(ProviderAPIError) -> JSON {
        try call(url, body: body.serialized(), headers: headers)
    }

    private func call(_ url: String, body: [UInt8]?, headers: () throws(ProviderAPIError) -> [String]) throws(ProviderAPIError) -> JSON {
        var attempt = 0
        while true {
            attempt += 1
            switch try once(url, body: body, headers: try headers(), attempt: attempt) {
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
        var error: ProviderAPIError
        var waitMilliseconds: Int64
    }

    /// One attempt: the JSON, a `Retry`, or (thrown) a failure that ends the call.
    private func once(_ url: String, body: [UInt8]?, headers: [String], attempt: Int) throws(ProviderAPIError) -> Result<JSON, Retry> {
        let response: HTTPClientResponse
        do {
            if let body {
                response = try http.post(url, headers: headers + ["Content-Type: application/json"], body: body)
            } else {
                response = try http.get(url, headers: headers)
            }
        } catch {
            return .failure(
                Retry(
                    error: ProviderAPIError(.transport, detail: (error.isTimeout ? "timeout: " : "") + error.message),
                    waitMilliseconds: backoff.randomDelay(attempt: attempt)))
        }
        if successStatuses.contains(response.status) {
            if body != nil && response.body.allSatisfy({ $0 == 0x20 || $0 == 0x0A || $0 == 0x0D }) { return .success(.object([:])) }
            guard let json = try? JSON.parse(response.body), json.objectValue != nil else {
                throw ProviderAPIError(.malformedResponse, status: response.status, detail: "not a JSON object")
            }
            return .success(json)
        }
        let errorBody = response.body.isEmpty ? nil : try? JSON.parse(response.body)
        let code = errorBody?[errorCodeMember]?.int64Value
        switch response.status {
        case 429:
            // Retry-After in seconds (RFC 9110); RevenueCat also states `backoff_ms` in the body.
            let fromBody = errorBody?["backoff_ms"]?.int64Value.map { Int(clamping: $0 / 1000) + ($0 % 1000 > 0 ? 1 : 0) }
            let retryAfter = max(response.retryAfterSeconds ?? fromBody ?? 1, 0)
            let limited = ProviderAPIError(.rateLimited, status: 429, errorCode: code, retryAfterSeconds: retryAfter)
            guard retryAfter <= maxRetryAfterSeconds else { throw limited }
            return .failure(Retry(error: limited, waitMilliseconds: Int64(retryAfter) * 1000))
        case 500...599:
            return .failure(
                Retry(
                    error: ProviderAPIError(.status, status: response.status, errorCode: code),
                    waitMilliseconds: backoff.randomDelay(attempt: attempt)))
        default:
            throw ProviderAPIError(.status, status: response.status, errorCode: code)
        }
    }

    /// A path segment or query value percent-encoded (RFC 3986 unreserved bytes kept): ids
    /// from outside are never trusted in a URL as they are.
    static func percentEncoded(_ value: String) -> String {
        var out = ""
        for byte in value.utf8 {
            switch byte {
            case UInt8(ascii: "0")...UInt8(ascii: "9"), UInt8(ascii: "A")...UInt8(ascii: "Z"), UInt8(ascii: "a")...UInt8(ascii: "z"),
                UInt8(ascii: "-"), UInt8(ascii: "_"), UInt8(ascii: "."), UInt8(ascii: "~"):
                out.unicodeScalars.append(Unicode.Scalar(byte))
            default:
                let hex = Array("0123456789ABCDEF".utf8)
                out.unicodeScalars.append("%")
                out.unicodeScalars.append(Unicode.Scalar(hex[Int(byte >> 4)]))
                out.unicodeScalars.append(Unicode.Scalar(hex[Int(byte & 0x0F)]))
            }
        }
        return out
    }
}
