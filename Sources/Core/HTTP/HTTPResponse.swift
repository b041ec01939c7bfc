/// A response produced by a handler; the FastCGI layer adds `Content-Length` and
/// `X-Request-Id` when writing it.
struct HTTPResponse: Sendable, Equatable {
    var status: HTTPStatus
    var headers: HTTPHeaders
    var body: [UInt8]

    init(status: HTTPStatus, headers: HTTPHeaders = HTTPHeaders(), body: [UInt8] = []) {
        self.status = status
        self.headers = headers
        self.body = body
    }

    /// `value` serialized compactly with `Content-Type: application/json`.
    static func json(_ status: HTTPStatus = .ok, _ value: JSON) -> HTTPResponse {
        HTTPResponse(status: status, headers: ["Content-Type": "application/json"], body: value.serialized())
    }

    /// Exactly `{"error":{"code":"...","message":"..."}}` (SPEC §4).
    static func error(_ status: HTTPStatus, code: String, message: String) -> HTTPResponse {
        .json(status, ["error": ["code": .string(code), "message": .string(message)]])
    }

    /// The envelope for `error`, with the status its kind maps to.
    static func error(_ error: APIError) -> HTTPResponse {
        .error(error.status, code: error.code, message: error.message)
    }

    /// The `code` of an error envelope body, for logs and metrics (nil for other bodies).
    var errorCode: String? {
        guard status.code >= 400, let json = try? JSON.parse(body, limits: JSONLimits(maxBytes: 65_536, maxDepth: 4)) else { return nil }
        return json["error"]?["code"]?.stringValue
    }
}
