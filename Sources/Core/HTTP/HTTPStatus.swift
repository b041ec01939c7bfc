/// An HTTP status code with its reason phrase (FastCGI's `Status: 404 Not Found` line).
struct HTTPStatus: Sendable, Hashable, CustomStringConvertible {
    let code: Int
    let reasonPhrase: String

    init(code: Int, reasonPhrase: String) {
        self.code = code
        self.reasonPhrase = reasonPhrase
    }

    static let ok = HTTPStatus(code: 200, reasonPhrase: "OK")
    static let created = HTTPStatus(code: 201, reasonPhrase: "Created")
    static let accepted = HTTPStatus(code: 202, reasonPhrase: "Accepted")
    static let noContent = HTTPStatus(code: 204, reasonPhrase: "No Content")
    static let notModified = HTTPStatus(code: 304, reasonPhrase: "Not Modified")
    static let badRequest = HTTPStatus(code: 400, reasonPhrase: "Bad Request")
    static let unauthorized = HTTPStatus(code: 401, reasonPhrase: "Unauthorized")
    static let paymentRequired = HTTPStatus(code: 402, reasonPhrase: "Payment Required")
    static let forbidden = HTTPStatus(code: 403, reasonPhrase: "Forbidden")
    static let notFound = HTTPStatus(code: 404, reasonPhrase: "Not Found")
    static let methodNotAllowed = HTTPStatus(code: 405, reasonPhrase: "Method Not Allowed")
    static let conflict = HTTPStatus(code: 409, reasonPhrase: "Conflict")
    static let gone = HTTPStatus(code: 410, reasonPhrase: "Gone")
    static let payloadTooLarge = HTTPStatus(code: 413, reasonPhrase: "Payload Too Large")
    static let unsupportedMediaType = HTTPStatus(code: 415, reasonPhrase: "Unsupported Media Type")
    static let unprocessableEntity = HTTPStatus(code: 422, reasonPhrase: "Unprocessable Entity")
    static let tooManyRequests = HTTPStatus(code: 429, reasonPhrase: "Too Many Requests")
    static let internalServerError = HTTPStatus(code: 500, reasonPhrase: "Internal Server Error")
    static let notImplemented = HTTPStatus(code: 501, reasonPhrase: "Not Implemented")
    static let serviceUnavailable = HTTPStatus(code: 503, reasonPhrase: "Service Unavailable")

    var description: String { "\(code) \(reasonPhrase)" }
}
