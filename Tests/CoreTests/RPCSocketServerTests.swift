import Glibc
import Synchronization
import Testing

@testable import Core

/// In-process tests of the socket server; the e2e script covers the daemon binary.
@Suite struct RPCSocketServerTests {
    private static func temporarySocketPath(_ name: String) -> String {
        "/tmp/core-rpc-\(getpid())-\(name).sock"
    }

    private static func makeServer(
        _ path: String, limits: RPCLimits = .default,
        configure: (inout RPCSocketServerConfiguration) -> Void = { _ in }
    ) -> RPCSocketServer<AdminRPCContext> {
        var registry = RPCMethodRegistry<AdminRPCContext>()
        registry.registerSystemMethods()
        var configuration = RPCSocketServerConfiguration(socketPath: path)
        configure(&configuration)
        return RPCSocketServer(
            configuration: configuration, protocol: JSONRPCServerProtocol(registry: registry, limits: limits),
            makeContext: { peer in AdminRPCContext(peer: peer) })
    }

    /// Connects, sends `bytes`, half-closes and returns everything the server sent until it closed.
    /// `mayBeRefused`: the server may answer and close before reading, so the send can fail
    /// (EPIPE/ECONNRESET) while the reply is still there to read.
    private static func exchange(_ path: String, _ bytes: [UInt8], mayBeRefused: Bool = false) throws -> String {
        let fd = socket(AF_UNIX, Int32(SOCK_STREAM.rawValue), 0)
        defer { close(fd) }
        var address = try UnixSocketAddress(path: path)
        #expect(address.withSockaddr { connect(fd, $0, $1) } == 0)
        let written = RPCSocketConnection<AdminRPCContext>.writeAll(fd, bytes)
        #expect(written || mayBeRefused)
        shutdown(fd, Int32(SHUT_WR))
        var received: [UInt8] = []
        var buffer = [UInt8](repeating: 0, count: 4096)
        while true {
            let count = buffer.withUnsafeMutableBytes { read(fd, $0.baseAddress, $0.count) }
            if count <= 0 { break }
            received += buffer[0..<count]
        }
        return String(decoding: received, as: UTF8.self)
    }

    @Test func servesLinesAndRemovesTheSocketOnStop() throws {
        let path = Self.temporarySocketPath("serve")
        let server = Self.makeServer(path)
        try server.start()
        var info = stat()
        #expect(stat(path, &info) == 0 && info.st_mode & 0o777 == 0o660)
        let text = try Self.exchange(
            path,
            Array(
                """
                {"jsonrpc":"2.0","method":"system.health","id":1}

                [{"jsonrpc":"2.0","method":"system.health"}]
                {"jsonrpc":"2.0","method":"nope","id":"last"}
                """.utf8))
        let lines = text.split(separator: "\n").map { try? JSON.parse(String($0)) }
        #expect(lines.count == 2, "the notification batch and the blank line get no reply")
        #expect(lines.first??["result"]?["status"] == "ok")
        #expect(lines.last??["id"] == "last", "a last line without newline is answered at end of input")
        server.stop()
        #expect(access(path, F_OK) != 0)
    }

    /// `admin.allowedUsers`: a peer whose uid the policy does not name gets one -32003 line
    /// (id null: nothing it sent was read) and the refusal hook; a named uid is served.
    @Test func refusesPeersOutsideThePolicyBeforeReadingAnything() throws {
        let refused = Mutex<[UInt32]>([])
        func serve(_ name: String, allowing uids: Set<UInt32>) throws -> String {
            let path = Self.temporarySocketPath(name)
            var registry = RPCMethodRegistry<AdminRPCContext>()
            registry.registerSystemMethods()
            var configuration = RPCSocketServerConfiguration(socketPath: path)
            configuration.peerPolicy = RPCPeerPolicy(allowedUIDs: uids)
            let server = RPCSocketServer(
                configuration: configuration, protocol: JSONRPCServerProtocol(registry: registry),
                makeContext: { peer in AdminRPCContext(peer: peer) },
                onRefusedPeer: { _, peer in refused.withLock { $0.append(peer?.uid ?? .max) } })
            try server.start()
            defer { server.stop() }
            return try Self.exchange(path, Array(#"{"jsonrpc":"2.0","method":"system.health","id":7}"#.utf8), mayBeRefused: true)
        }
        let me = getuid()
        let denied = try serve("peer-denied", allowing: [me &+ 1])
        let reply = try JSON.parse(String(denied.split(separator: "\n")[0]))
        #expect(reply["error"]?["code"]?.int64Value == -32003 && reply["id"] == .null)
        #expect(denied.split(separator: "\n").count == 1)
        #expect(refused.withLock { $0 } == [me])
        let allowed = try serve("peer-allowed", allowing: [me])
        #expect(try JSON.parse(String(allowed.split(separator: "\n")[0]))["id"]?.int64Value == 7)
        #expect(refused.withLock { $0 } == [me], "an admitted peer is not reported")
    }

    @Test func policyResolvesNamesAndUidsAndDefaultsToRootAndSelf() throws {
        #expect(try RPCPeerPolicy.resolving([]).allowedUIDs == [0, geteuid()])
        #expect(try RPCPeerPolicy.resolving(["root", "1234"]).allowedUIDs == [0, 1234])
        #expect(throws: ConfigurationError.self) { try RPCPeerPolicy.resolving(["no-such-user-here"]) }
        #expect(!RPCPeerPolicy(allowedUIDs: [0]).admits(nil), "unknown credentials are refused")
        #expect(SystemUsers.name(of: 0) == "root" && SystemUsers.uid(named: "root") == 0)
    }

    @Test func replacesAStaleSocketButRefusesALiveOneOrAFile() throws {
        let path = Self.temporarySocketPath("stale")
        let stale = socket(AF_UNIX, Int32(SOCK_STREAM.rawValue), 0)
        var address = try UnixSocketAddress(path: path)
        #expect(address.withSockaddr { bind(stale, $0, $1) } == 0)
        close(stale)
        let server = Self.makeServer(path)
        try server.start()
        defer { server.stop() }
        #expect(throws: RPCServerError.self) { try Self.makeServer(path).start() }

        let filePath = Self.temporarySocketPath("file")
        let file = open(filePath, O_CREAT | O_WRONLY, 0o600)
        close(file)
        defer { unlink(filePath) }
        do {
            try Self.makeServer(filePath).start()
            Issue.record("a regular file was replaced")
        } catch {
            #expect(error.description.contains("not a socket"))
        }
        #expect(access(filePath, F_OK) == 0)
    }

    @Test func closesAConnectionWhoseLineIsTooLong() throws {
        let path = Self.temporarySocketPath("long")
        let server = Self.makeServer(path, limits: RPCLimits(maxMessageBytes: 100))
        try server.start()
        defer { server.stop() }
        let text = try Self.exchange(
            path, Array(String(repeating: "x", count: 500).utf8) + Array("\n{\"jsonrpc\":\"2.0\",\"method\":\"system.health\",\"id\":1}\n".utf8))
        let lines = text.split(separator: "\n")
        #expect(lines.count == 1, "nothing after the oversized line is served")
        #expect(try JSON.parse(String(lines[0]))["error"]?["message"] == "Request too large: the limit is 100 bytes")
    }

    @Test func refusesConnectionsOverTheLimit() throws {
        let path = Self.temporarySocketPath("busy")
        let server = Self.makeServer(path) { $0.maxConnections = 1 }
        try server.start()
        defer { server.stop() }
        let held = socket(AF_UNIX, Int32(SOCK_STREAM.rawValue), 0)
        defer { close(held) }
        var address = try UnixSocketAddress(path: path)
        #expect(address.withSockaddr { connect(held, $0, $1) } == 0)
        let deadline = monotonicMilliseconds() + 2000
        while server.connectionCount < 1 && monotonicMilliseconds() < deadline { usleep(1000) }
        let text = try Self.exchange(path, Array("{\"jsonrpc\":\"2.0\",\"method\":\"system.health\",\"id\":1}\n".utf8), mayBeRefused: true)
        #expect(try JSON.parse(String(text.split(separator: "\n")[0]))["error"]?["code"] == -32000)
    }

    @Test func stopLetsTheCallInFlightFinish() throws {
        let path = Self.temporarySocketPath("inflight")
        var registry = RPCMethodRegistry<AdminRPCContext>()
        registry.register("slow", summary: "sleeps 300 ms") { _, _ in
            usleep(300_000)
            return "done"
        }
        let server = RPCSocketServer(
            configuration: .init(socketPath: path), protocol: JSONRPCServerProtocol(registry: registry),
            makeContext: { peer in AdminRPCContext(peer: peer) })
        try server.start()
        let fd = socket(AF_UNIX, Int32(SOCK_STREAM.rawValue), 0)
        defer { close(fd) }
        var address = try UnixSocketAddress(path: path)
        #expect(address.withSockaddr { connect(fd, $0, $1) } == 0)
        #expect(RPCSocketConnection<AdminRPCContext>.writeAll(fd, Array("{\"jsonrpc\":\"2.0\",\"method\":\"slow\",\"id\":1}\n".utf8)))
        usleep(100_000)
        let stopStarted = monotonicMilliseconds()
        server.stop()
        #expect(monotonicMilliseconds() - stopStarted >= 150, "stop returned before the call finished")
        var buffer = [UInt8](repeating: 0, count: 4096)
        let count = buffer.withUnsafeMutableBytes { read(fd, $0.baseAddress, $0.count) }
        #expect(count > 0)
        #expect(try JSON.parse(buffer[0..<max(count, 0)]) == ["jsonrpc": "2.0", "result": "done", "id": 1])
        #expect(access(path, F_OK) != 0)
    }

    @Test func parsesTheDaemonCommandLine() throws {
        let parsed = try RPCAdminCommandLine.parse(["--socket", "/tmp/x.sock", "--max-connections", "4", "--read-timeout", "2.5"])
        #expect(parsed.socketPath == "/tmp/x.sock" && parsed.maxConnections == 4 && parsed.readTimeoutSeconds == 2.5)
        #expect(throws: RPCServerError.self) { try RPCAdminCommandLine.parse([]) }
        #expect(throws: RPCServerError.self) { try RPCAdminCommandLine.parse(["--socket"]) }
        #expect(throws: RPCServerError.self) { try RPCAdminCommandLine.parse(["--socket", "a", "--idle-timeout", "-1"]) }
        #expect(try RPCAdminCommandLine.parse(["--help"]).showHelp)
    }
}

/// The one command-line reader of both daemons (issue 33).
@Suite struct CommandLineScannerTests {
    @Test func readsValuesFlagsAndRanges() throws {
        var words = CommandLineScanner(["--config", "/etc/x.json", "--status", "--threads", "8", "--ttl", "0", "--socket"])
        #expect(words.next() == "--config")
        #expect(try words.value("--config") == "/etc/x.json")
        #expect(words.next() == "--status")
        #expect(words.next() == "--threads")
        #expect(try words.integer("--threads", in: 1...256) == 8)
        #expect(words.next() == "--ttl")
        #expect(throws: CommandLineScanner.UsageError(message: "--ttl must be an integer in 1...60, got 0")) {
            try words.integer("--ttl", in: 1...60)
        }
        #expect(words.next() == "--socket")
        #expect(throws: CommandLineScanner.UsageError(message: "--socket needs a value")) { try words.value("--socket") }
        #expect(words.next() == nil)
        var numbers = CommandLineScanner(["0", "inf", "2.5"])
        for _ in 0..<2 { #expect(throws: CommandLineScanner.UsageError.self) { try numbers.positiveNumber("--idle-timeout") } }
        #expect(try numbers.positiveNumber("--idle-timeout") == 2.5)
    }

    @Test func theWorkerAndTheCommandsAnswerUsageErrorsWith64() {
        #expect(WorkerApp.main(arguments: ["--threads", "0"], environment: [:]) == 64)
        #expect(WorkerApp.main(arguments: ["--socket"], environment: [:]) == 64)
        #expect(WorkerApp.main(arguments: ["--nope", "x"], environment: [:]) == 64)
        #expect(RPCAdminApp.migrate(["--config"], environment: [:]) == 64)
        #expect(RPCAdminApp.doctor(["--min-free-bytes", "-1"], environment: [:]) == 64)
        #expect(RPCAdminApp.devToken(["--ttl", "soon"]) == 64)
    }
}
