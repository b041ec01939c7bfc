/// An HTTP status code with its reason phrase (FastCGI's `Status: 404 Not Found` line).
public struct HTTPStatus: Sendable, Hashable, CustomStringConvertible {
    public let code: Int
    public let reasonPhrase: String

    public init(code: Int, reasonPhrase: String) {
        self.code = code
        self.reasonPhrase = reasonPhrase
    }

    public static let ok = HTTPStatus(code: 200, reasonPhrase: "OK")
    public static let created = HTTPStatus(code: 201, reasonPhrase: "Created")
    public static let accepted = HTTPStatus(code: 202, reasonPhrase: "Accepted")
    public static let noContent = HTTPStatus(code: 204, reasonPhrase: "No Content")
    public static let badRequest = HTTPStatus(code: 400, reasonPhrase: "Bad Request")
    public static let unauthorized = HTTPStatus(code: 401, reasonPhrase: "Unauthorized")
    public static let paymentRequired = HTTPStatus(code: 402, reasonPhrase: "Payment Required")
    public static let forbidden = HTTPStatus(code: 403, reasonPhrase: "Forbidden")
    public static let notFound = HTTPStatus(code: 404, reasonPhrase: "Not Found")
    public static let methodNotAllowed = HTTPStatus(code: 405, reasonPhrase: "Method Not Allowed")
    public static let conflict = HTTPStatus(code: 409, reasonPhrase: "Conflict")
    public static let payloadTooLarge = HTTPStatus(code: 413, reasonPhrase: "Payload Too Large")
    public static let unsupportedMediaType = HTTPStatus(code: 415, reasonPhrase: "Unsupported Media Type")
    public static let unprocessableEntity = HTTPStatus(code: 422, reasonPhrase: "Unprocessable Entity")
    public static let tooManyRequests = HTTPStatus(code: 429, reasonPhrase: "Too Many Requests")
    public static let internalServerError = HTTPStatus(code: 500, reasonPhrase: "Internal Server Error")
    public static let notImplemented = HTTPStatus(code: 501, reasonPhrase: "Not Implemented")
    public static let serviceUnavailable = HTTPStatus(code: 503, reasonPhrase: "Service Unavailable")

    public var description: String { "\(code) \(reasonPhrase)" }
}
