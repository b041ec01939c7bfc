/// What a route serving a signed-in user needs of its request context: the user id (`sub`)
/// of the request's verified ID token. The application's context implements it with its
/// token verifier (401 for anything else, 501 without token keys).
protocol AuthenticatedRequestContext: RequestContextProtocol {
    func authenticatedUser(_ request: HTTPRequest) throws -> String
}
