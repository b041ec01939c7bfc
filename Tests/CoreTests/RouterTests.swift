import Testing

@testable import Core

private struct Boom: Error {}
private struct Unavailable: APIErrorConvertible {
    var apiError: APIError? { .unavailable() }
}
private struct UnmappedConvertible: APIErrorConvertible {
    var apiError: APIError? { nil }
}

@Suite struct RouterTests {
    private final class Reports {
        var errors: [String] = []
    }

    private func context(_ reports: Reports = Reports()) -> BillingRequestContext {
        BillingRequestContext(
            clock: FixedClock(Timestamp(secondsSinceEpoch: 1_700_000_000)),
            reportUnexpectedError: { error, _ in reports.errors.append(String(describing: error)) })
    }

    private func json(_ response: HTTPResponse) throws -> JSON { try JSON.parse(response.body) }

    private func router() -> Router<BillingRequestContext> {
        var router = BillingRoutes.makeRouter()
        router.get("/t/boom") { _, _ in throw Boom() }
        router.get("/t/bad") { _, _ in throw APIError.badRequest("amount must be positive", code: "invalid_amount") }
        router.get("/t/db") { _, _ in throw Unavailable() }
        router.get("/t/unmapped") { _, _ in throw UnmappedConvertible() }
        router.post("/t/json") { request, _ in .json(.ok, try request.jsonBody()) }
        router.get("/t/items/:id") { request, _ in .json(.ok, ["id": .string(request.pathParameters["id"] ?? "")]) }
        router.post("/t/items/:id") { _, _ in .json(.created, [:]) }
        return router
    }

    @Test func routesPingAndHealth() throws {
        let ping = router().respond(to: HTTPRequest(method: .get, path: "/api/v1/ping"), context: context())
        #expect(ping.status == .ok)
        #expect(String(decoding: ping.body, as: UTF8.self) == #"{"ok":true}"#)
        #expect(ping.headers["content-type"] == "application/json")

        let health = router().respond(to: HTTPRequest(method: .get, path: "/api/v1/health"), context: context())
        #expect(health.status == .ok)
        #expect(try json(health)["status"] == "ok")
        #expect(try json(health)["time"] == "2023-11-14T22:13:20.000Z")
    }

    @Test func healthReportsDatabaseDownAs503() throws {
        let ctx = context()
        ctx.databaseProbe = { throw Boom() }
        let health = router().respond(to: HTTPRequest(method: .get, path: "/api/v1/health"), context: ctx)
        #expect(health.status == .serviceUnavailable)
        #expect(try json(health)["status"] == "unavailable")
        #expect(try json(health)["database"] == "down")
        ctx.databaseProbe = {}
        let up = router().respond(to: HTTPRequest(method: .get, path: "/api/v1/health"), context: ctx)
        #expect(up.status == .ok)
        #expect(try json(up)["database"] == "ok")
    }

    @Test func unknownPathIs404Envelope() {
        for path in ["/nope", "/api/v1/ping/", "/api/v1", "/"] {
            let response = router().respond(to: HTTPRequest(method: .get, path: path), context: context())
            #expect(response.status == .notFound, "\(path)")
            #expect(String(decoding: response.body, as: UTF8.self) == #"{"error":{"code":"not_found","message":"no such resource"}}"#)
        }
    }

    @Test func wrongMethodIs405WithAllow() throws {
        let response = router().respond(to: HTTPRequest(method: .post, path: "/api/v1/ping"), context: context())
        #expect(response.status == .methodNotAllowed)
        #expect(response.headers["Allow"] == "GET, HEAD")
        #expect(try json(response)["error"]?["code"] == "method_not_allowed")
        let items = router().respond(to: HTTPRequest(method: .delete, path: "/t/items/7"), context: context())
        #expect(items.headers["allow"] == "GET, HEAD, POST")
    }

    @Test func headIsServedByGet() {
        let response = router().respond(to: HTTPRequest(method: .head, path: "/api/v1/ping"), context: context())
        #expect(response.status == .ok)
    }

    @Test func unexpectedErrorIsGeneric500AndReported() throws {
        let reports = Reports()
        let response = router().respond(to: HTTPRequest(method: .get, path: "/t/boom"), context: context(reports))
        #expect(response.status == .internalServerError)
        #expect(String(decoding: response.body, as: UTF8.self) == #"{"error":{"code":"internal","message":"internal error"}}"#)
        #expect(reports.errors == ["Boom()"])
        let unmapped = router().respond(to: HTTPRequest(method: .get, path: "/t/unmapped"), context: context(reports))
        #expect(unmapped.status == .internalServerError)
        #expect(reports.errors.count == 2)
    }

    @Test func apiErrorsKeepTheirStatusAndCode() throws {
        let reports = Reports()
        let bad = router().respond(to: HTTPRequest(method: .get, path: "/t/bad"), context: context(reports))
        #expect(bad.status == .badRequest)
        #expect(String(decoding: bad.body, as: UTF8.self) == #"{"error":{"code":"invalid_amount","message":"amount must be positive"}}"#)
        let db = router().respond(to: HTTPRequest(method: .get, path: "/t/db"), context: context(reports))
        #expect(db.status == .serviceUnavailable)
        #expect(try json(db)["error"]?["code"] == "unavailable")
        #expect(reports.errors.isEmpty)
    }

    @Test func malformedJSONBodyIs400NotA500() throws {
        for body in ["{", "", "[1,", "{\"a\":1,\"a\":2}"] {
            let response = router().respond(
                to: HTTPRequest(method: .post, path: "/t/json", body: Array(body.utf8)),
                context: context())
            #expect(response.status == .badRequest, "\(body)")
            #expect(try json(response)["error"]?["code"] == "invalid_json")
        }
        let ok = router().respond(to: HTTPRequest(method: .post, path: "/t/json", body: Array(#"{"a":1}"#.utf8)), context: context())
        #expect(ok.status == .ok)
    }

    @Test func pathParametersAreCaptured() throws {
        let response = router().respond(to: HTTPRequest(method: .get, path: "/t/items/a%20b+c"), context: context())
        #expect(try json(response)["id"] == "a b+c")
        #expect(router().respond(to: HTTPRequest(method: .get, path: "/t/items/"), context: context()).status == .notFound)
    }

    /// The exact-path lookup answers what the first match in registration order answers:
    /// every order of five patterns that overlap (a literal after a parameter pattern
    /// matching it, a trailing slash, a shorter path), against paths with and without the
    /// leading slash, with a trailing slash, and non-ASCII ones canonically equal to a
    /// literal (KELVIN SIGN is canonically "K"; a path is matched byte for byte).
    @Test func exactPathsAnswerAsTheFirstMatchInOrder() {
        let patterns = ["/a/K", "/a/:x", "/:y/K", "/a/K/", "/a"]
        let paths = ["/a/K", "a/K", "/a/K/", "/a/\u{212A}", "/a/c", "/c/K", "/a", "a", "/", "", "/a/K/x", "/\u{212A}/K", "/a/%4B"]
        func segments(_ s: String) -> [Substring] {
            (s.hasPrefix("/") ? s.dropFirst() : Substring(s)).split(separator: "/", omittingEmptySubsequences: false)
        }
        /// The rule, written plainly: the first pattern whose segments equal the path's byte
        /// for byte, a `:` segment taking any non-empty one.
        func expected(_ order: [String], _ path: String) -> String? {
            order.first { pattern in
                let (p, q) = (segments(pattern), segments(path))
                return p.count == q.count
                    && zip(p, q).allSatisfy { $0.hasPrefix(":") ? !$1.isEmpty : Array($0.utf8) == Array($1.utf8) }
            }
        }
        func permutations(_ items: [String]) -> [[String]] {
            items.count <= 1
                ? [items]
                : items.indices.flatMap { i in
                    var rest = items
                    let first = rest.remove(at: i)
                    return permutations(rest).map { [first] + $0 }
                }
        }
        var checked = 0
        for order in permutations(patterns) {
            var router = Router<BillingRequestContext>()
            for pattern in order { router.get(pattern) { _, _ in .json(.ok, [:]) } }
            for path in paths {
                #expect(router.pattern(matching: path) == expected(order, path), "\(order) \(path)")
                checked += 1
            }
        }
        #expect(checked == 120 * paths.count)
    }

    @Test func apiErrorStatusMapping() {
        #expect(APIError.badRequest("x").status.code == 400)
        #expect(APIError.unauthorized().status.code == 401)
        #expect(APIError.quotaExceeded("x").status.code == 402)
        #expect(APIError.notFound().status.code == 404)
        #expect(APIError.conflict("x").status.code == 409)
        #expect(APIError.payloadTooLarge("x").status.code == 413)
        #expect(APIError.unprocessable("x").status.code == 422)
        #expect(APIError.notConfigured("x").status.code == 501)
        #expect(APIError.unavailable().status.code == 503)
        #expect(APIError.internalError.status.code == 500)
        #expect(APIError.internalError.code == "internal")
    }

    /// Galera: a node outside the primary component refuses statements with 1047, and a
    /// certification conflict surfaces as 1213 at COMMIT. Both are retryable (503, and the
    /// JSON-RPC "unavailable" code), never the generic 500 (docs/scaling.md).
    @Test func galeraErrorsAreRetryable() {
        for errno: UInt32 in [1047, 1180, 1213, 1205, 2002, 2013] {
            let error = DatabaseError(kind: DatabaseError.kind(forErrno: errno), errno: errno)
            #expect(error.apiError?.status.code == 503, "errno \(errno)")
            #expect(error.rpcError.code == RPCError.Code.unavailable, "errno \(errno)")
        }
        let refused = DatabaseError(kind: DatabaseError.kind(forErrno: 1047), errno: 1047)
        #expect(refused.isUnavailable)
        #expect(!refused.dropsConnection, "the node answers again once it rejoins: keep the connection")
        #expect(DatabaseError(kind: DatabaseError.kind(forErrno: 1213), errno: 1213).isDeadlockOrLockWait)
    }
}
