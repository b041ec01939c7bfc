/// What a route serving a signed-in user needs of its request context: the user id (`sub`)
/// of the request's verified ID token. The application's context implements it with its
/// token verifier (401 for anything else, 501 without token keys).
protocol AuthenticatedRequestContext: RequestContextProtocol {
    func authenticatedUser(_ request: HTTPRequest) throws -> String
}

/// The request context of a route serving a signed-in user from the database.
typealias UserRequestContext = AuthenticatedRequestContext & DatabaseRequestContext
