/// Handles one request on a worker thread. Throw `APIError` (or an `APIErrorConvertible`)
/// for anything the client caused; anything else becomes the generic 500.
typealias RouteHandler<Context> = @Sendable (HTTPRequest, Context) throws -> HTTPResponse

/// Maps (method, path pattern) to handlers. Patterns are `/`-separated literal segments and
/// `:name` segments that capture one segment into `HTTPRequest.pathParameters`. Built once
/// at start-up (the application's route table), then shared read-only by all worker
/// threads. Generic over the application's request context, which it knows only through
/// `RequestContextProtocol`.
struct Router<Context: RequestContextProtocol>: Sendable {
    private struct Route: Sendable {
        let pattern: String
        let segments: [Segment]
        var handlers: [HTTPMethod: RouteHandler<Context>]
    }

    private enum Segment: Sendable, Equatable {
        case literal(String)
        case parameter(String)
    }

    private var routes: [Route] = []
    /// The literal patterns (no `:name` segment) as the path that matches them, to the
    /// route's index: most requests' path is one of them, found by one hash instead of a
    /// segment-by-segment match against every route before it (~20k instructions of a
    /// health request). Only a pattern no earlier route also matches is here, so the
    /// answer is the linear scan's, registration order included.
    private var exactPaths: [String: Int] = [:]

    init() {}

    /// Registers `handler`; re-registering the same method and pattern replaces it.
    mutating func add(_ method: HTTPMethod, _ pattern: String, _ handler: @escaping RouteHandler<Context>) {
        let segments = Router.split(pattern).map { part -> Segment in
            part.hasPrefix(":") ? .parameter(String(part.dropFirst())) : .literal(String(part))
        }
        if let index = routes.firstIndex(where: { $0.segments == segments }) {
            routes[index].handlers[method] = handler
        } else {
            routes.append(Route(pattern: pattern, segments: segments, handlers: [method: handler]))
        }
        exactPaths = Router.exactPaths(of: routes)
    }

    private static func exactPaths(of routes: [Route]) -> [String: Int] {
        var paths: [String: Int] = [:]
        for (index, route) in routes.enumerated() {
            var literals: [Substring] = []
            for case .literal(let literal) in route.segments { literals.append(Substring(literal)) }
            guard literals.count == route.segments.count,
                !routes[..<index].contains(where: { match($0.segments, literals) != nil })
            else { continue }
            paths["/" + literals.joined(separator: "/")] = index
        }
        return paths
    }

    /// Every registered pattern, in registration order (the metrics' route labels).
    var patterns: [String] { routes.map(\.pattern) }

    /// The pattern `path` matches, if any (the `route` label of metrics and access logs).
    func pattern(matching path: String) -> String? {
        firstMatch(path)?.route.pattern
    }

    mutating func get(_ pattern: String, _ handler: @escaping RouteHandler<Context>) { add(.get, pattern, handler) }
    mutating func post(_ pattern: String, _ handler: @escaping RouteHandler<Context>) { add(.post, pattern, handler) }

    /// Routes `request` and always returns a response: 404 for an unknown path, 405 with
    /// `Allow` for a known path and another method (HEAD is served by a GET handler), the
    /// error envelope for thrown errors.
    func respond(to request: HTTPRequest, context: Context) -> HTTPResponse {
        route(request, context: context).response
    }

    /// `respond`, and the pattern the path matched (nil for none): the `route` label of
    /// metrics and access logs, from the same single match.
    func route(_ request: HTTPRequest, context: Context) -> (response: HTTPResponse, pattern: String?) {
        guard let (route, parameters) = firstMatch(request.path) else {
            context.outcome = APIError.Kind.notFound.defaultCode
            return (.error(.notFound()), nil)
        }
        return (respond(to: request, route: route, parameters: parameters, context: context), route.pattern)
    }

    private func respond(to request: HTTPRequest, route: Route, parameters: [String: String], context: Context) -> HTTPResponse {
        let handler =
            route.handlers[request.method]
            ?? (request.method == .head ? route.handlers[.get] : nil)
        guard let handler else {
            var methods = Set(route.handlers.keys.map(\.rawValue))
            if methods.contains("GET") { methods.insert("HEAD") }
            var response = HTTPResponse.error(APIError(.methodNotAllowed, message: "method \(request.method) not allowed"))
            response.headers["Allow"] = methods.sorted().joined(separator: ", ")
            context.outcome = APIError.Kind.methodNotAllowed.defaultCode
            return response
        }
        var request = request
        request.pathParameters = parameters
        do {
            return try handler(request, context)
        } catch {
            return Router.response(for: error, context: context)
        }
    }

    /// The one place a thrown error becomes a response.
    static func response(for error: any Error, context: Context) -> HTTPResponse {
        context.observe(error: error)
        let response = errorResponse(for: error, context: context)
        if context.outcome == nil, let code = response.errorCode { context.outcome = code }
        return response
    }

    private static func errorResponse(for error: any Error, context: Context) -> HTTPResponse {
        if let apiError = error as? APIError {
            if apiError.kind == .internalError { context.reportUnexpectedError(error) }
            return .error(apiError)
        }
        if let convertible = error as? any APIErrorConvertible, let apiError = convertible.apiError {
            return .error(apiError)
        }
        context.reportUnexpectedError(error)
        return .error(.internalError)
    }

    /// `/a/b` → `["a", "b"]`; a trailing slash yields a final empty segment, so
    /// `/a/b/` is a different path from `/a/b`.
    private static func split(_ path: String) -> [Substring] {
        // On the UTF-8 bytes: `/` is ASCII, so every cut is a character boundary.
        let utf8 = path.utf8
        var start = utf8.first == 0x2F ? utf8.index(after: utf8.startIndex) : utf8.startIndex
        var segments: [Substring] = []
        var index = start
        while index != utf8.endIndex {
            if utf8[index] == 0x2F {
                segments.append(path[start..<index])
                start = utf8.index(after: index)
            }
            index = utf8.index(after: index)
        }
        segments.append(path[start..<utf8.endIndex])
        return segments
    }

    private func firstMatch(_ path: String) -> (route: Route, parameters: [String: String])? {
        // ASCII only: String's hash and == follow canonical equivalence, and a path is
        // matched byte for byte (U+212A KELVIN SIGN is canonically "K").
        if path.utf8.allSatisfy({ $0 < 0x80 }), let index = exactPaths[path] { return (routes[index], [:]) }
        let pathSegments = Router.split(path)
        for route in routes {
            if let parameters = Router.match(route.segments, pathSegments) { return (route, parameters) }
        }
        return nil
    }

    private static func match(_ pattern: [Segment], _ path: [Substring]) -> [String: String]? {
        guard pattern.count == path.count else { return nil }
        var parameters: [String: String] = [:]
        for (segment, part) in zip(pattern, path) {
            switch segment {
            case .literal(let literal):
                // Byte for byte: a path is matched as sent (no Unicode equivalence), so
                // String's normalizing == has nothing to add on every request's path.
                guard part.utf8.elementsEqual(literal.utf8) else { return nil }
            case .parameter(let name):
                guard !part.isEmpty else { return nil }
                parameters[name] = QueryItem.percentDecode(part, plusIsSpace: false)
            }
        }
        return parameters
    }
}
