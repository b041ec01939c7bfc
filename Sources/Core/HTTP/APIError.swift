/// An error answered to an API client as `{"error":{"code":"...","message":"..."}}` (SPEC §4).
///
/// The kind decides the HTTP status, in one place (`status`); `code` is a stable
/// machine-readable string (the kind's default, or a more specific one such as
/// `invalid_json`), and `message` is written for the client: it must never carry SQL,
/// secrets or internal details.
struct APIError: Error, Sendable, Equatable, CustomStringConvertible {
    /// The category of failure; new kinds can be added without breaking callers.
    struct Kind: Sendable, Hashable {
        fileprivate enum Value: Sendable, Hashable {
            case badRequest, unauthorized, quotaExceeded, forbidden, notFound, methodNotAllowed, conflict, gone,
                payloadTooLarge, unsupportedMediaType, unprocessable, notConfigured, unavailable, internalError
        }
        fileprivate let value: Value

        static let badRequest = Kind(value: .badRequest)
        static let unauthorized = Kind(value: .unauthorized)
        static let quotaExceeded = Kind(value: .quotaExceeded)
        static let forbidden = Kind(value: .forbidden)
        static let notFound = Kind(value: .notFound)
        static let methodNotAllowed = Kind(value: .methodNotAllowed)
        static let conflict = Kind(value: .conflict)
        /// What the request names existed and was erased (`user_deleted`, SPEC §19).
        static let gone = Kind(value: .gone)
        static let payloadTooLarge = Kind(value: .payloadTooLarge)
        /// A body in a media type the route does not read (415).
        static let unsupportedMediaType = Kind(value: .unsupportedMediaType)
        static let unprocessable = Kind(value: .unprocessable)
        /// A provider route whose configuration is absent (SPEC: 501).
        static let notConfigured = Kind(value: .notConfigured)
        /// Retryable: the database (or another dependency) is down (SPEC: 503).
        static let unavailable = Kind(value: .unavailable)
        static let internalError = Kind(value: .internalError)

        /// The status for this kind: the only mapping from API errors to HTTP statuses.
        var status: HTTPStatus {
            switch value {
            case .badRequest: return .badRequest
            case .unauthorized: return .unauthorized
            case .quotaExceeded: return .paymentRequired
            case .forbidden: return .forbidden
            case .notFound: return .notFound
            case .methodNotAllowed: return .methodNotAllowed
            case .conflict: return .conflict
            case .gone: return .gone
            case .payloadTooLarge: return .payloadTooLarge
            case .unsupportedMediaType: return .unsupportedMediaType
            case .unprocessable: return .unprocessableEntity
            case .notConfigured: return .notImplemented
            case .unavailable: return .serviceUnavailable
            case .internalError: return .internalServerError
            }
        }

        /// The `code` used when the thrower does not name a more specific one.
        var defaultCode: String {
            switch value {
            case .badRequest: return "bad_request"
            case .unauthorized: return "unauthorized"
            case .quotaExceeded: return "quota_exceeded"
            case .forbidden: return "forbidden"
            case .notFound: return "not_found"
            case .methodNotAllowed: return "method_not_allowed"
            case .conflict: return "conflict"
            case .gone: return "gone"
            case .payloadTooLarge: return "payload_too_large"
            case .unsupportedMediaType: return "unsupported_media_type"
            case .unprocessable: return "unprocessable"
            case .notConfigured: return "not_configured"
            case .unavailable: return "unavailable"
            case .internalError: return "internal"
            }
        }
    }

    let kind: Kind
    let code: String
    let message: String

    init(_ kind: Kind, code: String? = nil, message: String) {
        self.kind = kind
        self.code = code ?? kind.defaultCode
        self.message = message
    }

    var status: HTTPStatus { kind.status }
    var description: String { "\(status.code) \(code): \(message)" }

    static func badRequest(_ message: String, code: String? = nil) -> APIError { APIError(.badRequest, code: code, message: message) }
    static func unauthorized(_ message: String = "authentication required", code: String? = nil) -> APIError {
        APIError(.unauthorized, code: code, message: message)
    }
    static func quotaExceeded(_ message: String, code: String? = nil) -> APIError { APIError(.quotaExceeded, code: code, message: message) }
    static func notFound(_ message: String = "no such resource", code: String? = nil) -> APIError {
        APIError(.notFound, code: code, message: message)
    }
    static func conflict(_ message: String, code: String? = nil) -> APIError { APIError(.conflict, code: code, message: message) }
    static func gone(_ message: String, code: String? = nil) -> APIError { APIError(.gone, code: code, message: message) }
    static func payloadTooLarge(_ message: String, code: String? = nil) -> APIError { APIError(.payloadTooLarge, code: code, message: message) }
    static func unsupportedMediaType(_ message: String, code: String? = nil) -> APIError {
        APIError(.unsupportedMediaType, code: code, message: message)
    }
    static func unprocessable(_ message: String, code: String? = nil) -> APIError { APIError(.unprocessable, code: code, message: message) }
    static func notConfigured(_ message: String, code: String? = nil) -> APIError { APIError(.notConfigured, code: code, message: message) }
    static func unavailable(_ message: String = "service temporarily unavailable, retry later", code: String? = nil) -> APIError {
        APIError(.unavailable, code: code, message: message)
    }
    /// The generic 500. Its message never says what went wrong; the details go to the log.
    static let internalError = APIError(.internalError, message: "internal error")
}

/// An error type from another layer that knows how it should be answered to a client.
/// The Router consults it so it never needs to know the concrete type; e.g. the Database
/// layer conforms `DatabaseError` and answers `.unavailable()` when `isUnavailable`.
protocol APIErrorConvertible: Error {
    /// The client-facing error, or nil when this is an unexpected failure that should be
    /// logged and answered with the generic 500.
    var apiError: APIError? { get }
}

extension JSONError: APIErrorConvertible {
    /// A JSON document a client sent could not be parsed: that is bad input, never a 500.
    /// `JSONError.description` is documented as safe to return to the sender.
    var apiError: APIError? {
        kind == .tooLarge ? .payloadTooLarge(description) : .badRequest(description, code: "invalid_json")
    }
}
