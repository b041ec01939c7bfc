import Synchronization
import Testing

@testable import Core

/// The registry of section 7 of the JSON-RPC 2.0 specification: `subtract` (by position
/// and by name), `sum`, `update`, `notify_hello`, `notify_sum` and `get_data`; `foobar`
/// and `foo.get` deliberately do not exist.
private func specRegistry() -> RPCMethodRegistry<AdminRPCContext> {
    var registry = RPCMethodRegistry<AdminRPCContext>()
    registry.register("subtract", summary: "minuend - subtrahend", params: "[minuend, subtrahend] | {minuend, subtrahend}") { request, _ in
        if let positional = request.params.positional {
            guard positional.count == 2, let minuend = positional[0].int64Value, let subtrahend = positional[1].int64Value else {
                throw RPCError.invalidParams("expected [minuend, subtrahend] as two integers")
            }
            return .int(minuend - subtrahend)
        }
        try request.params.expectOnly("minuend", "subtrahend")
        return .int(Int64(try request.params.requireInt("minuend") - request.params.requireInt("subtrahend")))
    }
    registry.register("sum", summary: "Sum of integers", params: "[integer...]") { request, _ in
        var total: Int64 = 0
        for (index, element) in (request.params.positional ?? []).enumerated() {
            guard let number = element.int64Value else { throw RPCError.invalidParams("element \(index) must be an integer") }
            total += number
        }
        return .int(total)
    }
    registry.register("update", summary: "Accepts anything", params: "[any...]") { _, _ in .null }
    registry.register("notify_hello", summary: "Says hello", params: "[integer]") { _, _ in .null }
    registry.register("notify_sum", summary: "Sums, for nobody", params: "[integer...]") { _, _ in .null }
    registry.register("get_data", summary: "Fixed data") { _, _ in ["hello", 5] }
    return registry
}

private func reply(
    _ message: String, registry: RPCMethodRegistry<AdminRPCContext> = specRegistry(), limits: RPCLimits = .default,
    context: AdminRPCContext = AdminRPCContext(clock: FixedClock(Timestamp(secondsSinceEpoch: 1_800_000_000)))
) -> JSON? {
    let server = JSONRPCServerProtocol(registry: registry, limits: limits)
    guard let bytes = server.handle(message: Array(message.utf8), context: context) else { return nil }
    #expect(!bytes.contains(UInt8(ascii: "\n")), "a reply must fit on one line")
    return try? JSON.parse(bytes)
}

/// The specification lets a server add `data` to an error; ours puts details there. This
/// removes `error.data` so a reply can be compared with the specification's text exactly.
private func withoutErrorData(_ value: JSON?) -> JSON? {
    switch value {
    case .array(let elements)?: return .array(elements.map { withoutErrorData($0)! })
    case .object(var object)?:
        if case .object(var error)? = object["error"] {
            error["data"] = nil
            object["error"] = .object(error)
        }
        return .object(object)
    default: return value
    }
}

private func json(_ text: String) -> JSON { try! JSON.parse(text) }

@Suite struct JSONRPCSpecificationExamples {
    @Test func positionalParameters() {
        #expect(
            reply(#"{"jsonrpc": "2.0", "method": "subtract", "params": [42, 23], "id": 1}"#)
                == json(#"{"jsonrpc": "2.0", "result": 19, "id": 1}"#))
        #expect(
            reply(#"{"jsonrpc": "2.0", "method": "subtract", "params": [23, 42], "id": 2}"#)
                == json(#"{"jsonrpc": "2.0", "result": -19, "id": 2}"#))
    }

    @Test func namedParameters() {
        #expect(
            reply(#"{"jsonrpc": "2.0", "method": "subtract", "params": {"subtrahend": 23, "minuend": 42}, "id": 3}"#)
                == json(#"{"jsonrpc": "2.0", "result": 19, "id": 3}"#))
        #expect(
            reply(#"{"jsonrpc": "2.0", "method": "subtract", "params": {"minuend": 42, "subtrahend": 23}, "id": 4}"#)
                == json(#"{"jsonrpc": "2.0", "result": 19, "id": 4}"#))
    }

    @Test func notificationsGetNoReply() {
        #expect(reply(#"{"jsonrpc": "2.0", "method": "update", "params": [1,2,3,4,5]}"#) == nil)
        #expect(reply(#"{"jsonrpc": "2.0", "method": "foobar"}"#) == nil)
    }

    @Test func nonExistentMethod() {
        #expect(
            reply(#"{"jsonrpc": "2.0", "method": "foobar", "id": "1"}"#)
                == json(#"{"jsonrpc": "2.0", "error": {"code": -32601, "message": "Method not found"}, "id": "1"}"#))
    }

    @Test func invalidJSON() {
        let answer = reply(#"{"jsonrpc": "2.0", "method": "foobar, "params": "bar", "baz]"#)
        #expect(
            withoutErrorData(answer)
                == json(#"{"jsonrpc": "2.0", "error": {"code": -32700, "message": "Parse error"}, "id": null}"#))
        #expect(answer?["error"]?["data"]?.stringValue?.contains("line 1") == true)
    }

    @Test func invalidRequestObject() {
        let answer = reply(#"{"jsonrpc": "2.0", "method": 1, "params": "bar"}"#)
        #expect(
            withoutErrorData(answer)
                == json(#"{"jsonrpc": "2.0", "error": {"code": -32600, "message": "Invalid Request"}, "id": null}"#))
        #expect(answer?["error"]?["data"] == "\"method\" must be a string, got number")
    }

    @Test func batchWithInvalidJSON() {
        let message = """
            [
              {"jsonrpc": "2.0", "method": "sum", "params": [1,2,4], "id": "1"},
              {"jsonrpc": "2.0", "method"
            ]
            """
        #expect(
            withoutErrorData(reply(message))
                == json(#"{"jsonrpc": "2.0", "error": {"code": -32700, "message": "Parse error"}, "id": null}"#))
    }

    @Test func emptyArray() {
        let answer = reply("[]")
        #expect(
            withoutErrorData(answer)
                == json(#"{"jsonrpc": "2.0", "error": {"code": -32600, "message": "Invalid Request"}, "id": null}"#))
        #expect(answer?.arrayValue == nil, "an empty batch is answered with one object, not an array")
    }

    @Test func invalidBatchOfOne() {
        #expect(
            withoutErrorData(reply("[1]"))
                == json(#"[{"jsonrpc": "2.0", "error": {"code": -32600, "message": "Invalid Request"}, "id": null}]"#))
    }

    @Test func invalidBatchOfThree() {
        #expect(
            withoutErrorData(reply("[1,2,3]"))
                == json(
                    """
                    [
                      {"jsonrpc": "2.0", "error": {"code": -32600, "message": "Invalid Request"}, "id": null},
                      {"jsonrpc": "2.0", "error": {"code": -32600, "message": "Invalid Request"}, "id": null},
                      {"jsonrpc": "2.0", "error": {"code": -32600, "message": "Invalid Request"}, "id": null}
                    ]
                    """))
    }

    @Test func mixedBatchKeepsRequestOrder() {
        let message = """
            [
                {"jsonrpc": "2.0", "method": "sum", "params": [1,2,4], "id": "1"},
                {"jsonrpc": "2.0", "method": "notify_hello", "params": [7]},
                {"jsonrpc": "2.0", "method": "subtract", "params": [42,23], "id": "2"},
                {"foo": "boo"},
                {"jsonrpc": "2.0", "method": "foo.get", "params": {"name": "myself"}, "id": "5"},
                {"jsonrpc": "2.0", "method": "get_data", "id": "9"}
            ]
            """
        #expect(
            withoutErrorData(reply(message))
                == json(
                    """
                    [
                        {"jsonrpc": "2.0", "result": 7, "id": "1"},
                        {"jsonrpc": "2.0", "result": 19, "id": "2"},
                        {"jsonrpc": "2.0", "error": {"code": -32600, "message": "Invalid Request"}, "id": null},
                        {"jsonrpc": "2.0", "error": {"code": -32601, "message": "Method not found"}, "id": "5"},
                        {"jsonrpc": "2.0", "result": ["hello", 5], "id": "9"}
                    ]
                    """))
    }

    @Test func batchOfNotificationsOnly() {
        let message = """
            [
                {"jsonrpc": "2.0", "method": "notify_sum", "params": [1,2,4]},
                {"jsonrpc": "2.0", "method": "notify_hello", "params": [7]}
            ]
            """
        #expect(reply(message) == nil)
    }
}

@Suite struct JSONRPCProtocolEdgeCases {
    @Test(arguments: [
        #""abc""#, #""""#, "7", "-3", "0", "1.5", "-0.25", "1e300", "9007199254740993", "9223372036854775807",
        "-9223372036854775808", "null",
    ])
    func echoesTheIdWithItsType(id: String) {
        let answer = reply(#"{"jsonrpc":"2.0","method":"sum","params":[1],"id":\#(id)}"#)
        #expect(answer?["id"] == json(id))
        #expect(answer?["result"] == 1)
    }

    @Test func echoesLargeIntegersDigitForDigit() {
        let server = JSONRPCServerProtocol(registry: specRegistry())
        let bytes = server.handle(
            message: Array(#"{"jsonrpc":"2.0","method":"sum","id":9007199254740993}"#.utf8),
            context: AdminRPCContext())
        #expect(String(decoding: bytes ?? [], as: UTF8.self).contains("\"id\":9007199254740993"))
    }

    @Test(arguments: ["{}", "[1]", "true", "false"])
    func refusesIdsOfOtherTypesWithIdNull(id: String) {
        let answer = reply(#"{"jsonrpc":"2.0","method":"sum","params":[1],"id":\#(id)}"#)
        #expect(answer?["error"]?["code"] == -32600)
        #expect(answer?["id"] == .null)
        #expect(answer?["error"]?["data"]?.stringValue?.contains("\"id\"") == true)
    }

    @Test func explicitNullIdIsARequestNotANotification() {
        #expect(
            reply(#"{"jsonrpc":"2.0","method":"get_data","id":null}"#)
                == json(#"{"jsonrpc":"2.0","result":["hello",5],"id":null}"#))
    }

    @Test(arguments: [#""1.0""#, #""2""#, "2.0", "null"])
    func requiresJsonrpcExactly20(version: String) {
        let answer = reply(#"{"jsonrpc":\#(version),"method":"sum","id":5}"#)
        #expect(answer?["error"]?["code"] == -32600)
        #expect(answer?["id"] == 5, "the id was readable, so it is echoed")
    }

    @Test func requiresJsonrpcMember() {
        #expect(reply(#"{"method":"sum","id":5}"#)?["error"]?["code"] == -32600)
    }

    @Test(arguments: [
        #"{"jsonrpc":"2.0","id":1}"#, #"{"jsonrpc":"2.0","method":null,"id":1}"#,
        #"{"jsonrpc":"2.0","method":["sum"],"id":1}"#,
    ])
    func requiresAStringMethod(message: String) {
        let answer = reply(message)
        #expect(answer?["error"]?["code"] == -32600)
        #expect(answer?["id"] == 1)
    }

    @Test(arguments: [#""bar""#, "1", "null", "true"])
    func requiresStructuredParams(params: String) {
        let answer = reply(#"{"jsonrpc":"2.0","method":"sum","params":\#(params),"id":1}"#)
        #expect(answer?["error"]?["code"] == -32600)
        #expect(answer?["error"]?["data"]?.stringValue?.contains("\"params\"") == true)
    }

    @Test func invalidRequestWithoutIdIsStillAnswered() {
        #expect(reply(#"{"jsonrpc":"2.0","method":"sum","params":"x"}"#)?["id"] == .null)
        #expect(reply(#"[{"jsonrpc":"2.0","method":1}]"#)?[0]?["error"]?["code"] == -32600)
    }

    @Test func reservedRpcMethodsDoNotExist() {
        #expect(reply(#"{"jsonrpc":"2.0","method":"rpc.discover","id":1}"#)?["error"]?["code"] == -32601)
    }

    @Test(arguments: ["", "   ", "\u{1}", #"{"jsonrpc":"2.0","method":"sum","id":1,"id":2}"#, "[1,]"])
    func parseErrors(message: String) {
        let answer = reply(message)
        #expect(answer?["error"]?["code"] == -32700)
        #expect(answer?["id"] == .null)
    }

    @Test func invalidParamsArePrecise() {
        let wrongType = reply(#"{"jsonrpc":"2.0","method":"subtract","params":{"minuend":"42","subtrahend":1},"id":1}"#)
        #expect(
            wrongType?["error"]
                == json(#"{"code":-32602,"message":"Invalid params: \"minuend\" must be an integer, got string","data":{"field":"minuend"}}"#))
        let missing = reply(#"{"jsonrpc":"2.0","method":"subtract","params":{"minuend":42},"id":2}"#)
        #expect(missing?["error"]?["message"] == #"Invalid params: "subtrahend" is required"#)
        let unknown = reply(#"{"jsonrpc":"2.0","method":"subtract","params":{"minuend":4,"subtrahend":1,"subtrahends":1},"id":3}"#)
        #expect(unknown?["error"]?["message"]?.stringValue?.contains("unknown parameter \"subtrahends\"") == true)
        #expect(unknown?["error"]?["data"] == ["field": "subtrahends"])
        #expect(missing?["error"]?["data"] == ["field": "subtrahend"])
        #expect(reply(#"{"jsonrpc":"2.0","method":"sum","params":[1,"2"],"id":4}"#)?["error"]?["code"] == -32602)
    }

    @Test func applicationErrorsCarryCodeMessageAndData() {
        var registry = RPCMethodRegistry<AdminRPCContext>()
        registry.register("grants.revoke", summary: "test") { _, _ in
            throw RPCError(code: 4004, message: "Grant not found", data: ["grantId": "g-1"])
        }
        #expect(
            reply(#"{"jsonrpc":"2.0","method":"grants.revoke","id":"r"}"#, registry: registry)
                == json(#"{"jsonrpc":"2.0","error":{"code":4004,"message":"Grant not found","data":{"grantId":"g-1"}},"id":"r"}"#))
    }

    private struct DomainNotFound: RPCErrorConvertible {
        var rpcError: RPCError { RPCError(code: 4040, message: "User not found") }
    }

    private struct DatabaseFailure: Error, CustomStringConvertible {
        var description: String { "Table 'billing.secret_table' doesn't exist, password=hunter2" }
    }

    @Test func convertibleErrorsUseTheirOwnForm() {
        var registry = RPCMethodRegistry<AdminRPCContext>()
        registry.register("access.get", summary: "test") { _, _ in throw DomainNotFound() }
        #expect(
            reply(#"{"jsonrpc":"2.0","method":"access.get","id":1}"#, registry: registry)?["error"]
                == json(#"{"code":4040,"message":"User not found"}"#))
    }

    @Test func unexpectedErrorsBecomeInternalErrorWithoutDetails() throws {
        var registry = RPCMethodRegistry<AdminRPCContext>()
        registry.register("stats.subscriptions", summary: "test") { _, _ in throw DatabaseFailure() }
        let logged = Mutex<[String]>([])
        let server = JSONRPCServerProtocol(registry: registry) { method, error in
            logged.withLock { $0.append("\(method): \(error)") }
        }
        let bytes =
            server.handle(
                message: Array(#"{"jsonrpc":"2.0","method":"stats.subscriptions","id":1}"#.utf8),
                context: AdminRPCContext()) ?? []
        let text = String(decoding: bytes, as: UTF8.self)
        #expect(try JSON.parse(bytes) == json(#"{"jsonrpc":"2.0","error":{"code":-32603,"message":"Internal error"},"id":1}"#))
        #expect(!text.contains("secret") && !text.contains("hunter2"))
        #expect(logged.withLock { $0 } == ["stats.subscriptions: Table 'billing.secret_table' doesn't exist, password=hunter2"])
        // A failing notification is logged too but answered with nothing.
        #expect(server.handle(message: Array(#"{"jsonrpc":"2.0","method":"stats.subscriptions"}"#.utf8), context: AdminRPCContext()) == nil)
        #expect(logged.withLock { $0.count } == 2)
    }

    @Test func oversizedMessageIsRefusedWithIdNull() {
        let limits = RPCLimits(maxMessageBytes: 64)
        let message = #"{"jsonrpc":"2.0","method":"sum","params":[\#(String(repeating: "1,", count: 40))1],"id":1}"#
        let answer = reply(message, limits: limits)
        #expect(answer == json(#"{"jsonrpc":"2.0","error":{"code":-32600,"message":"Request too large: the limit is 64 bytes"},"id":null}"#))
        #expect(reply(#"{"jsonrpc":"2.0","method":"sum","params":[1],"id":1}"#, limits: limits)?["result"] == 1)
    }

    @Test func longBatchIsRefusedAsAWhole() {
        let limits = RPCLimits(maxBatchLength: 3)
        let element = #"{"jsonrpc":"2.0","method":"sum","params":[1],"id":1}"#
        #expect(reply("[\(Array(repeating: element, count: 3).joined(separator: ","))]", limits: limits)?.arrayValue?.count == 3)
        let answer = reply("[\(Array(repeating: element, count: 4).joined(separator: ","))]", limits: limits)
        #expect(answer == json(#"{"jsonrpc":"2.0","error":{"code":-32600,"message":"Batch too large: 4 requests, the limit is 3"},"id":null}"#))
    }

    @Test func deepNestingIsRefused() {
        let limits = RPCLimits(maxDepth: 8)
        let shallow = #"{"jsonrpc":"2.0","method":"update","params":[[[[[[1]]]]]],"id":1}"#
        #expect(reply(shallow, limits: limits)?["result"] == .null)
        let deep = #"{"jsonrpc":"2.0","method":"update","params":[[[[[[[[[1]]]]]]]]],"id":1}"#
        let answer = reply(deep, limits: limits)
        #expect(answer?["error"]?["code"] == -32600)
        #expect(answer?["id"] == .null)
        #expect(answer?["error"]?["message"]?.stringValue?.contains("8 levels") == true)
    }

    @Test func repliesStayOnOneLine() {
        var registry = RPCMethodRegistry<AdminRPCContext>()
        registry.register("echo", summary: "test") { request, _ in request.params.value ?? .null }
        let answer = reply(#"{"jsonrpc":"2.0","method":"echo","params":["a\nb\r\nc\u2028"],"id":1}"#, registry: registry)
        #expect(answer?["result"] == ["a\nb\r\nc\u{2028}"])
    }
}

@Suite struct RPCParamsValidation {
    private let params = RPCParams(
        json(
            #"{"userId":"u1","tier":"pro","limit":10,"ratio":2.0,"dryRun":true,"note":null,"startsAt":"2026-01-31T12:00:00+01:00","ids":["a"],"filter":{}}"#
        ))

    @Test func readsTypedValues() throws {
        #expect(try params.requireString("userId") == "u1")
        #expect(try params.requireString("tier", oneOf: ["plus", "pro"]) == "pro")
        #expect(try params.requireInt("limit", in: 1...100) == 10)
        #expect(try params.optionalInt("ratio") == 2)
        #expect(try params.requireBool("dryRun"))
        #expect(try params.optionalString("note") == nil, "null counts as absent")
        #expect(try params.optionalString("missing") == nil)
        #expect(try params.requireTimestamp("startsAt") == Timestamp(iso8601: "2026-01-31T11:00:00Z"))
        #expect(try params.requireArray("ids") == ["a"])
        #expect(try params.requireObject("filter").isEmpty)
        #expect(try RPCParams(nil).optionalBool("dryRun") == nil)
    }

    @Test func failuresNameTheParameter() throws {
        #expect(throws: RPCError.invalidParams("\"note\" is required", field: "note")) { try params.requireString("note") }
        #expect(throws: RPCError.invalidParams("\"limit\" must be between 1 and 5", field: "limit")) { try params.requireInt("limit", in: 1...5) }
        #expect(throws: RPCError.invalidParams("\"tier\" must be one of \"plus\"", field: "tier")) {
            try params.requireString("tier", oneOf: ["plus"])
        }
        #expect(throws: RPCError.invalidParams("\"userId\" must be at most 1 characters", field: "userId")) {
            try params.requireString("userId", maxLength: 1)
        }
        #expect(throws: RPCError.invalidParams("\"userId\" must be a boolean, got string", field: "userId")) { try params.requireBool("userId") }
        #expect(throws: RPCError.self) { try params.requireTimestamp("userId") }
        for spelling in ["production", "Production", "PRODUCTION"] {
            #expect(try RPCParams(["environment": .string(spelling)]).requireEnvironment() == .production)
        }
        #expect(try RPCParams(["environment": "SANDBOX"]).requireEnvironment() == .sandbox)
        #expect(throws: RPCError.self) { try RPCParams(["environment": "staging"]).requireEnvironment() }
        #expect(throws: RPCError.invalidParams("params must be an object with named members")) {
            try RPCParams(["u1"]).requireString("userId")
        }
        #expect(throws: RPCError.self) { try params.expectOnly("userId") }
        #expect(throws: Never.self) {
            try params.expectOnly("userId", "tier", "limit", "ratio", "dryRun", "note", "startsAt", "ids", "filter")
        }
        #expect(RPCError.invalidParams("x").code == -32602)
    }
}

@Suite struct RPCSystemMethods {
    private func systemRegistry(server: RPCServerInfo = RPCServerInfo()) -> RPCMethodRegistry<AdminRPCContext> {
        var registry = RPCMethodRegistry<AdminRPCContext>()
        registry.register("grants.create", summary: "Grant a tier", params: "{userId, tier}") { _, _ in .null }
        registry.registerSystemMethods(server: server)
        return registry
    }

    @Test func healthReportsProcessClockAndDatabaseHook() {
        let clock = FixedClock(Timestamp(secondsSinceEpoch: 1_800_000_000))
        let plain = reply(
            #"{"jsonrpc":"2.0","method":"system.health","id":1}"#, registry: systemRegistry(server: RPCServerInfo(version: "1.2.3")),
            context: AdminRPCContext(clock: clock))?["result"]
        #expect(plain?["status"] == "ok")
        #expect(plain?["version"] == "1.2.3")
        #expect(plain?["serverTime"] == "2027-01-15T08:00:00.000Z")
        #expect(plain?["pid"]?.intValue ?? 0 > 0)
        #expect(plain?["uptimeSeconds"]?.intValue == 0)
        #expect(plain?["database"] == ["status": "not configured"])

        let probed = reply(
            #"{"jsonrpc":"2.0","method":"system.health","id":1}"#, registry: systemRegistry(),
            context: AdminRPCContext(clock: clock, databaseStatus: { ["status": "ok", "latencyMs": 2] }))
        #expect(probed?["result"]?["database"] == ["status": "ok", "latencyMs": 2])
        #expect(
            reply(#"{"jsonrpc":"2.0","method":"system.health","params":{"x":1},"id":1}"#, registry: systemRegistry())?["error"]?["code"] == -32602)
    }

    @Test func listMethodsIncludesEveryMethodSorted() {
        let result = reply(#"{"jsonrpc":"2.0","method":"system.listMethods","id":1}"#, registry: systemRegistry())?["result"]
        #expect(result?.arrayValue?.compactMap { $0["name"]?.stringValue } == ["grants.create", "system.health", "system.listMethods"])
        #expect(
            result?[0] == [
                "name": "grants.create", "summary": "Grant a tier", "params": "{userId, tier}",
                "paramTypes": ["userId": "string", "tier": "string"],
            ])
    }
}
