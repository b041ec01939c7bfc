/// Why a call to a provider's API (the App Store Server API, RevenueCat's REST API) gave
/// nothing usable. Carries no token, header or
/// payload (logs and metrics read it).
struct ProviderAPIError: Error, Sendable, Equatable, CustomStringConvertible {
    enum Kind: String, Sendable {
        /// The provider answered this HTTP status (with its own error code when the body had one).
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
