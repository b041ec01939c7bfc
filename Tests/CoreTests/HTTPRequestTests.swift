import Testing

@testable import Core

@Suite struct HTTPRequestTests {
    private let nginxParams: [String: String] = [
        "REQUEST_METHOD": "POST",
        "REQUEST_URI": "/api/v1/billing/usage?dry=1&name=a%20b+c&flag",
        "DOCUMENT_URI": "/api/v1/billing/usage",
        "QUERY_STRING": "dry=1&name=a%20b+c&flag",
        "CONTENT_TYPE": "application/json",
        "CONTENT_LENGTH": "2",
        "REMOTE_ADDR": "203.0.113.9",
        "HTTP_AUTHORIZATION": "Bearer abc.def.ghi",
        "HTTP_X_REQUEST_ID": "0123abcd",
        "HTTP_USER_AGENT": "curl/8",
        "SERVER_PROTOCOL": "HTTP/1.1",
    ]

    @Test func buildsRequestFromParams() {
        let request = HTTPRequest(fastCGIParams: nginxParams, body: Array("{}".utf8), id: "r1")
        #expect(request.method == .post)
        #expect(request.path == "/api/v1/billing/usage")
        #expect(request.queryString == "dry=1&name=a%20b+c&flag")
        #expect(
            request.queryItems == [
                QueryItem(name: "dry", value: "1"), QueryItem(name: "name", value: "a b c"),
                QueryItem(name: "flag", value: ""),
            ])
        #expect(request.queryValue("name") == "a b c")
        #expect(request.remoteAddress == "203.0.113.9")
        #expect(request.body == Array("{}".utf8))
        #expect(request.id == "r1")
        #expect(request.bearerToken == "abc.def.ghi")
    }

    @Test func headerLookupIsCaseInsensitive() {
        let request = HTTPRequest(fastCGIParams: nginxParams, body: [], id: "r1")
        #expect(request.headers["Authorization"] == "Bearer abc.def.ghi")
        #expect(request.headers["authorization"] == "Bearer abc.def.ghi")
        #expect(request.headers["X-Request-Id"] == "0123abcd")
        #expect(request.headers["Content-Type"] == "application/json")
        #expect(request.headers["content-length"] == "2")
        #expect(request.headers["user-agent"] == "curl/8")
        #expect(request.headers["Server-Protocol"] == nil)
        #expect(request.headers["X-Missing"] == nil)
    }

    @Test func fallsBackWhenParamsAreMissing() {
        let bare = HTTPRequest(fastCGIParams: ["SCRIPT_NAME": "/api/v1/ping"], body: [], id: "x")
        #expect(bare.method == .get)
        #expect(bare.path == "/api/v1/ping")
        #expect(bare.queryString == "")
        let uriOnly = HTTPRequest(fastCGIParams: ["REQUEST_METHOD": "get", "REQUEST_URI": "/a?b=c"], body: [], id: "x")
        #expect(uriOnly.method == .get)
        #expect(uriOnly.path == "/a")
        #expect(uriOnly.queryValue("b") == "c")
        #expect(HTTPRequest(fastCGIParams: [:], body: [], id: "x").path == "/")
    }

    @Test func bearerTokenParsing() {
        func token(_ value: String) -> String? {
            HTTPRequest(method: .get, path: "/", headers: ["Authorization": value]).bearerToken
        }
        #expect(token("bearer  tok ") == "tok")
        #expect(token("Basic abc") == nil)
        #expect(token("Bearer") == nil)
        #expect(token("Bearer ") == nil)
        #expect(token("Bearer \t a b \t") == "a b")
        #expect(token("Bearer \t ") == nil)
        let long = String(repeating: "x", count: 900)
        #expect(token("Bearer " + long + "  ") == long)
    }

    @Test func queryDecodingKeepsInvalidEscapes() {
        #expect(
            QueryItem.parse("a=%zz&b=%4&c=%41%42&&d==e") == [
                QueryItem(name: "a", value: "%zz"), QueryItem(name: "b", value: "%4"), QueryItem(name: "c", value: "AB"),
                QueryItem(name: "d", value: "=e"),
            ])
    }

    @Test func requestIDPrefersNginxAndRejectsUnsafeValues() {
        #expect(RequestID.forwarded(in: ["REQUEST_ID": "abc123", "HTTP_X_REQUEST_ID": "zzz"]) == "abc123")
        #expect(RequestID.forwarded(in: ["HTTP_X_REQUEST_ID": "f00d"]) == "f00d")
        #expect(RequestID.forwarded(in: ["HTTP_X_REQUEST_ID": "a\r\nSet-Cookie: x"]) == nil)
        #expect(RequestID.forwarded(in: ["HTTP_X_REQUEST_ID": String(repeating: "a", count: 129)]) == nil)
        let generated = RequestID.forParams([:])
        #expect(generated.count == 32)
        #expect(generated.allSatisfy { $0.isHexDigit })
        #expect(generated != RequestID.generate())
    }

    @Test func bodyPlanRefusesOversizedBeforeReading() {
        #expect(RequestBodyPolicy.plan(contentLength: "10", limit: 10) == .readExactly(10))
        #expect(RequestBodyPolicy.plan(contentLength: "0", limit: 10) == .readExactly(0))
        #expect(RequestBodyPolicy.plan(contentLength: "11", limit: 10) == .reject(RequestBodyPolicy.tooLarge(10)))
        #expect(RequestBodyPolicy.plan(contentLength: "99999999999999999999999", limit: 10) == .reject(RequestBodyPolicy.tooLarge(10)))
        #expect(RequestBodyPolicy.plan(contentLength: nil, limit: 10) == .readToEnd(limit: 10))
        #expect(RequestBodyPolicy.plan(contentLength: "", limit: 10) == .readToEnd(limit: 10))
        for bad in ["-1", "1e3", " 5", "0x10", "5 "] {
            guard case .reject(let error) = RequestBodyPolicy.plan(contentLength: bad, limit: 10) else {
                Issue.record("accepted \(bad)")
                continue
            }
            #expect(error.status == .badRequest)
        }
        if case .reject(let error) = RequestBodyPolicy.plan(contentLength: "11", limit: 10) {
            #expect(error.status.code == 413)
            #expect(error.code == "payload_too_large")
        } else {
            Issue.record("expected a rejection")
        }
    }

    @Test func bodyVerdictAfterReading() {
        #expect(RequestBodyPolicy.verdict(plan: .readExactly(5), received: 5, moreInput: false) == nil)
        #expect(RequestBodyPolicy.verdict(plan: .readExactly(5), received: 4, moreInput: false)?.status == .badRequest)
        #expect(RequestBodyPolicy.verdict(plan: .readExactly(5), received: 5, moreInput: true)?.status == .badRequest)
        #expect(RequestBodyPolicy.verdict(plan: .readToEnd(limit: 5), received: 5, moreInput: false) == nil)
        #expect(RequestBodyPolicy.verdict(plan: .readToEnd(limit: 5), received: 6, moreInput: false)?.status.code == 413)
    }

    @Test func headerNamesCompareASCIICaseInsensitivelyOnly() {
        #expect(HTTPHeaders.sameName("Content-Type", "content-TYPE"))
        #expect(HTTPHeaders.sameName("X-1_a", "x-1_A"))
        #expect(!HTTPHeaders.sameName("Content-Type", "Content-Typ"))
        #expect(!HTTPHeaders.sameName("[", "{"), "0x5B and 0x7B differ only in bit 0x20 but are not letters")
        #expect(!HTTPHeaders.sameName("@", "`"))
        var headers: HTTPHeaders = ["Authorization": "a", "X-Other": "b", "authorization": "c"]
        #expect(headers["AUTHORIZATION"] == "a" && headers.values(for: "authorization") == ["a", "c"])
        headers.remove(name: "AuThOrIzAtIoN")
        #expect(headers.count == 1 && headers["x-other"] == "b")
        #expect(HTTPHeaders(dictionaryLiteral: ("a", "1")) == HTTPHeaders(dictionaryLiteral: ("A", "1")))
    }
}
