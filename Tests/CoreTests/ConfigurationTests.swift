import Glibc
import Testing

@testable import Core

@Suite struct ConfigurationTests {
    @Test func defaultsWhenEmpty() throws {
        let config = try BillingConfiguration(json: [:])
        #expect(config.database.port == 3306)
        #expect(config.server.threadsPerWorker == 4)
        #expect(config.binding.policy == .deny)
        #expect(config.users.idPattern == BillingConfiguration.Users.uuidPattern)
        #expect(config.reporting.currency == "EUR")
        #expect(config.revenuecat.webhookSecret == nil)
    }

    @Test func decodesTheContractKeys() throws {
        let config = try BillingConfiguration(json: [
            "database": ["socket": "/run/db.sock", "user": "u", "password": "p", "name": "n"],
            "auth": ["keysFile": "/k.json", "issuer": "iss", "audience": "aud", "leewaySeconds": 30],
            "revenuecat": ["webhookSecret": "Bearer s3cret"],
            "apple": ["trustedRootsFiles": ["/a.der"], "bundleId": "com.x", "appAppleId": 123, "environments": ["Sandbox"]],
            "products": ["com.x.pro.monthly": ["tier": "pro", "cadence": "monthly"]],
            "binding": ["policy": "restore_moves"],
            "users": ["idPattern": "^[a-z]+$"],
            "reporting": ["currency": "USD"],
        ])
        #expect(config.database.socket == "/run/db.sock")
        #expect(config.database.password == "p")
        #expect(config.auth.audience == "aud")
        #expect(config.revenuecat.webhookSecret == "Bearer s3cret")
        #expect(config.apple.appAppleId == 123)
        #expect(config.apple.environments == ["Sandbox"])
        #expect(config.products["com.x.pro.monthly"] == .init(tier: .pro, cadence: .monthly))
        #expect(config.binding.policy == .restoreMoves)
        #expect(config.reporting.currency == "USD")
        #expect(!config.description.contains("s3cret"), "secrets never printed")
        #expect(!config.description.contains("\"p\""))
    }

    @Test func reportsEveryProblemWithItsKey() {
        do {
            _ = try BillingConfiguration(json: [
                "database": ["port": 70000, "user": 5],
                "server": ["threadsPerWorker": 0],
                "binding": ["policy": "steal"],
                "products": ["p1": ["tier": "gold", "cadence": "monthly"]],
                "users": ["idPattern": "(unclosed"],
                "reporting": ["currency": "euro"],
                "revenucat": ["webhookSecret": "typo section"],
            ])
            Issue.record("expected a ConfigurationError")
        } catch {
            let text = error.description
            for key in [
                "database.port", "database.user", "server.threadsPerWorker", "binding.policy",
                "products.p1", "users.idPattern", "reporting.currency", "revenucat: unknown key",
            ] {
                #expect(text.contains(key), "\(key) missing from: \(text)")
            }
            #expect(error.problems.count == 8)
        }
    }

    @Test func webServerAddressesAreIPv4Addresses() throws {
        let config = try BillingConfiguration(json: ["server": ["webServerAddrs": ["10.0.0.5", "127.0.0.1"]]])
        #expect(config.server.webServerAddrs == ["10.0.0.5", "127.0.0.1"])
        for bad: JSON in ["10.0.0.5", ["10.0.0.256"], ["nginx.internal"], ["::1"], ["10.0.0.5/24"], [5]] {
            #expect(throws: ConfigurationError.self, "\(bad)") {
                try BillingConfiguration(json: ["server": ["webServerAddrs": bad]])
            }
        }
    }

    @Test func environmentOverridesAndSecretFiles() throws {
        let dir = "/tmp/fcgibilling-config-test-\(getpid())"
        mkdir(dir, 0o700)
        defer {
            unlink("\(dir)/config.json")
            unlink("\(dir)/secret")
            rmdir(dir)
        }
        try write("\(dir)/config.json", #"{"database": {"host": "db.example", "port": 3306}, "revenuecat": {"webhookSecretFile": "\#(dir)/secret"}}"#)
        try write("\(dir)/secret", "Bearer from-file\n")
        let config = try BillingConfiguration.load(
            path: "\(dir)/config.json",
            environment: [
                "BILLING__database__port": "3310",
                "BILLING__database__password": "pw with spaces",
                "BILLING__server__threadsPerWorker": "8",
                "UNRELATED": "x",
            ])
        #expect(config.database.host == "db.example")
        #expect(config.database.port == 3310)
        #expect(config.database.password == "pw with spaces")
        #expect(config.server.threadsPerWorker == 8)
        #expect(config.revenuecat.webhookSecret == "Bearer from-file")
    }

    @Test func missingOrMalformedFileIsAClearError() throws {
        #expect(throws: ConfigurationError.self) { try BillingConfiguration.load(path: "/nonexistent/billing.json", environment: [:]) }
        let path = "/tmp/fcgibilling-config-bad-\(getpid()).json"
        try write(path, "{ not json")
        defer { unlink(path) }
        do {
            _ = try BillingConfiguration.load(path: path, environment: [:])
            Issue.record("expected an error")
        } catch {
            #expect(error.description.contains(path))
            #expect(error.description.contains("line 1"))
        }
    }

    /// A later layer's choice of a secret's form replaces the earlier one's: an environment
    /// variable setting `webhookSecret` over a file that sets `webhookSecretFile` (and the
    /// reverse, and for every `xFile` pair) is not "both".
    @Test func laterLayerReplacesTheOtherFormOfASecret() throws {
        let dir = "/tmp/fcgibilling-config-twin-\(getpid())"
        mkdir(dir, 0o700)
        defer {
            unlink("\(dir)/config.json")
            unlink("\(dir)/secret")
            rmdir(dir)
        }
        try write("\(dir)/secret", "from-file\n")
        try write("\(dir)/config.json", #"{"revenuecat": {"webhookSecretFile": "/nonexistent/secret"}, "database": {"password": "base"}}"#)
        let inline = try BillingConfiguration.load(
            path: "\(dir)/config.json",
            environment: [
                "BILLING__revenuecat__webhookSecret": "Bearer inline",
                "BILLING__database__passwordFile": "\(dir)/secret",
            ])
        #expect(inline.revenuecat.webhookSecret == "Bearer inline", "the unreadable base file is no longer read")
        #expect(inline.database.password == "from-file")
        for (key, twin) in [("webhookSecret", "webhookSecretFile"), ("passwordFile", "password"), ("privateKeyFile", "privateKey")] {
            #expect(JSONObject.twin(of: key) == twin)
        }
    }

    /// `billing-rpc config-merge` (an overlay over the generated configuration): objects merge
    /// key by key, anything else replaces, and a replaced secret's other form goes with it.
    @Test func mergingAnOverlayIsDeepAndReplacesTheOtherFormOfASecret() {
        let base: JSONObject = [
            "database": ["socket": "/run/db.sock", "user": "billing", "passwordFile": "/secrets/db", "port": 3306],
            "revenuecat": ["webhookSecretFile": "/secrets/rc"],
            "apple": ["trustedRootsFiles": ["/a.der"], "environments": ["Production"]],
            "log": ["level": "info"],
        ]
        let overlay: JSONObject = [
            "database": ["password": "inline", "port": 3307, "tls": ["caFile": "/ca.pem"]],
            "revenuecat": ["webhookSecret": "Bearer x"],
            "apple": ["trustedRootsFiles": ["/b.der", "/c.der"], "serverApi": ["keyId": "K"]],
            "log": "not an object",
            "products": ["p": ["tier": "pro"]],
        ]
        let merged = base.deepMerging(overlay)
        #expect(
            merged == [
                "database": ["socket": "/run/db.sock", "user": "billing", "password": "inline", "port": 3307, "tls": ["caFile": "/ca.pem"]],
                "revenuecat": ["webhookSecret": "Bearer x"],
                "apple": ["trustedRootsFiles": ["/b.der", "/c.der"], "environments": ["Production"], "serverApi": ["keyId": "K"]],
                "log": "not an object",
                "products": ["p": ["tier": "pro"]],
            ])
        // An object over a non-object replaces it; the reverse form of a secret too.
        let log: JSONObject = ["log": "x"]
        #expect(log.deepMerging(["log": ["level": "debug"]]) == ["log": ["level": "debug"]])
        let inline: JSONObject = ["password": "p"]
        #expect(inline.deepMerging(["passwordFile": "/f"]) == ["passwordFile": "/f"])
        #expect(base.deepMerging([:]) == base)
        #expect(JSONObject().deepMerging(base) == base)
    }

    @Test func allowedUsersTakesNamesAndUids() throws {
        let config = try BillingConfiguration(json: ["admin": ["allowedUsers": ["ops", 1001]]])
        #expect(config.admin.allowedUsers == ["ops", "1001"])
        #expect(throws: ConfigurationError.self) { try BillingConfiguration(json: ["admin": ["allowedUsers": [-1]]]) }
        #expect(throws: ConfigurationError.self) { try BillingConfiguration(json: ["admin": ["allowedUsers": "root"]]) }
    }

    /// `apple.environments` in any spelling the providers use, kept as Apple writes it.
    @Test func environmentsAcceptEverySpelling() throws {
        let config = try BillingConfiguration(json: ["apple": ["environments": ["production", "SANDBOX"]]])
        #expect(config.apple.environments == ["Production", "Sandbox"])
        #expect(throws: ConfigurationError.self) { try BillingConfiguration(json: ["apple": ["environments": ["staging"]]]) }
    }

    @Test func secretAndSecretFileTogetherIsRefused() {
        #expect(throws: ConfigurationError.self) {
            try BillingConfiguration(json: ["revenuecat": ["webhookSecret": "a", "webhookSecretFile": "/x"]])
        }
    }

    // MARK: - database.tls

    /// A directory with a CA bundle, a client certificate and its key (PEM-shaped: the
    /// configuration checks the kind of each file, the TLS library its content).
    private func withTLSFiles(_ body: (_ dir: String) throws -> Void) throws {
        let dir = "/tmp/fcgibilling-config-tls-\(getpid())-\(UInt32.random(in: 0...UInt32.max))"
        mkdir(dir, 0o700)
        defer {
            for name in ["ca.pem", "cert.pem", "key.pem", "encrypted-key.pem", "config.json"] { unlink("\(dir)/\(name)") }
            rmdir(dir)
        }
        let certificate = "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n"
        try write("\(dir)/ca.pem", "# bundle\n" + certificate + certificate)
        try write("\(dir)/cert.pem", certificate)
        try write("\(dir)/key.pem", "-----BEGIN EC PRIVATE KEY-----\r\nMHc\r\n-----END EC PRIVATE KEY-----\r\n")
        try write("\(dir)/encrypted-key.pem", "-----BEGIN ENCRYPTED PRIVATE KEY-----\nMIH\n-----END ENCRYPTED PRIVATE KEY-----\n")
        try body(dir)
    }

    /// The problems of a configuration that must be refused (an Issue when it is accepted).
    private func problems(_ json: JSON) -> [String] {
        do {
            _ = try BillingConfiguration(json: json)
            Issue.record("expected a ConfigurationError for \(json)")
            return []
        } catch {
            return error.problems
        }
    }

    @Test func tlsIsOffByDefaultAndWhenNull() throws {
        #expect(try BillingConfiguration(json: [:]).database.tls == nil)
        #expect(try BillingConfiguration(json: ["database": ["host": "db.internal", "tls": .null]]).database.tls == nil)
    }

    @Test func tlsDecodesTheCAAndTheClientCertificate() throws {
        try withTLSFiles { dir in
            let caOnly = try BillingConfiguration(json: ["database": ["host": "db.internal", "tls": ["caFile": .string("\(dir)/ca.pem")]]])
            #expect(caOnly.database.tls == DatabaseConfiguration.TLS(caFile: "\(dir)/ca.pem"))
            let mutual = try BillingConfiguration(json: [
                "database": [
                    "host": "db.internal", "port": 3306,
                    "tls": [
                        "caFile": .string("\(dir)/ca.pem"), "certFile": .string("\(dir)/cert.pem"), "keyFile": .string("\(dir)/key.pem"),
                    ],
                ]
            ])
            #expect(mutual.database.tls == DatabaseConfiguration.TLS(caFile: "\(dir)/ca.pem", certFile: "\(dir)/cert.pem", keyFile: "\(dir)/key.pem"))
            #expect(mutual.description.contains("db.internal:3306 (TLS)"))
        }
    }

    /// Every mistake names its key: no caFile, half a client certificate, a file that is not
    /// there or not the right kind of PEM, an encrypted key, a key that does not exist (there
    /// is no switch to skip verification), and a value of the wrong type.
    @Test func tlsProblemsNameTheirKeys() throws {
        try withTLSFiles { dir in
            let ca = JSON.string("\(dir)/ca.pem")
            let cases: [(JSON, [String])] = [
                (["host": "h", "tls": [:]], ["database.tls.caFile: required"]),
                (
                    ["host": "h", "tls": ["caFile": ca, "certFile": .string("\(dir)/cert.pem")]],
                    ["database.tls.keyFile: set certFile and keyFile together"]
                ),
                (
                    ["host": "h", "tls": ["caFile": ca, "keyFile": .string("\(dir)/key.pem")]],
                    ["database.tls.certFile: set certFile and keyFile together"]
                ),
                (["host": "h", "tls": ["caFile": "/nonexistent/ca.pem"]], ["database.tls.caFile: cannot read /nonexistent/ca.pem"]),
                (
                    ["host": "h", "tls": ["caFile": .string("\(dir)/key.pem")]],
                    ["database.tls.caFile: \(dir)/key.pem: not a PEM file with a CERTIFICATE"]
                ),
                (
                    ["host": "h", "tls": ["caFile": ca, "certFile": .string("\(dir)/cert.pem"), "keyFile": .string("\(dir)/cert.pem")]],
                    ["database.tls.keyFile: \(dir)/cert.pem: not a PEM file with a PRIVATE KEY"]
                ),
                (
                    ["host": "h", "tls": ["caFile": ca, "certFile": .string("\(dir)/cert.pem"), "keyFile": .string("\(dir)/encrypted-key.pem")]],
                    ["database.tls.keyFile: \(dir)/encrypted-key.pem: an encrypted private key is not supported"]
                ),
                (["host": "h", "tls": ["caFile": ca, "verifyServerCertificate": false]], ["database.tls.verifyServerCertificate: unknown key"]),
                (["host": "h", "tls": ["caFile": 5]], ["database.tls.caFile: expected a string"]),
                (["host": "h", "tls": ["caFile": ""]], ["database.tls.caFile: expected a file path"]),
                (["host": "h", "tls": true], ["database.tls: expected an object"]),
            ]
            for (database, expected) in cases {
                let found = problems(["database": database])
                #expect(found.count == expected.count, "\(database): \(found)")
                for text in expected {
                    #expect(found.contains { $0.hasPrefix(text) }, "\(text) missing from \(found)")
                }
            }
        }
    }

    /// Over the Unix socket TLS would not apply (the socket wins): the pair is refused,
    /// whichever layer set which.
    @Test func tlsWithASocketIsRefused() throws {
        try withTLSFiles { dir in
            let found = problems(["database": ["socket": "/run/mysqld/mysqld.sock", "tls": ["caFile": .string("\(dir)/ca.pem")]]])
            #expect(found.count == 1)
            #expect(found.first?.hasPrefix("database.tls: TLS is for TCP") == true, "\(found)")
        }
    }

    /// The environment override takes nested keys: `BILLING__database__tls__caFile`, and
    /// `BILLING__database__socket=null` to move a socket configuration to TCP;
    /// `BILLING__database__tls=null` turns off the file's TLS.
    @Test func tlsThroughEnvironmentOverrides() throws {
        try withTLSFiles { dir in
            try write("\(dir)/config.json", #"{"database": {"socket": "/run/mysqld/mysqld.sock", "user": "billing"}}"#)
            let config = try BillingConfiguration.load(
                path: "\(dir)/config.json",
                environment: [
                    "BILLING__database__socket": "null",
                    "BILLING__database__host": "db.internal",
                    "BILLING__database__tls__caFile": "\(dir)/ca.pem",
                    "BILLING__database__tls__certFile": "\(dir)/cert.pem",
                    "BILLING__database__tls__keyFile": "\(dir)/key.pem",
                ])
            #expect(config.database.socket == nil)
            #expect(config.database.host == "db.internal")
            #expect(config.database.tls == DatabaseConfiguration.TLS(caFile: "\(dir)/ca.pem", certFile: "\(dir)/cert.pem", keyFile: "\(dir)/key.pem"))

            // Without moving off the socket, the override is refused rather than ignored.
            #expect(throws: ConfigurationError.self) {
                try BillingConfiguration.load(path: "\(dir)/config.json", environment: ["BILLING__database__tls__caFile": "\(dir)/ca.pem"])
            }

            try write("\(dir)/config.json", #"{"database": {"host": "db.internal", "tls": {"caFile": "\#(dir)/ca.pem"}}}"#)
            #expect(try BillingConfiguration.load(path: "\(dir)/config.json", environment: [:]).database.tls != nil)
            let off = try BillingConfiguration.load(path: "\(dir)/config.json", environment: ["BILLING__database__tls": "null"])
            #expect(off.database.tls == nil)
        }
    }

    private func write(_ path: String, _ text: String) throws {
        let fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0o600)
        #expect(fd >= 0)
        _ = text.withCString { Glibc.write(fd, $0, strlen($0)) }
        close(fd)
    }
}

@Suite struct LoggerTests {
    @Test func writesOneJSONObjectPerLineWithMetadata() throws {
        let path = "/tmp/fcgibilling-log-test-\(getpid()).log"
        defer { unlink(path) }
        let sink = try LogSink(path: path, minimumLevel: .info)
        let clock = FixedClock(Timestamp(millisecondsSinceEpoch: 0))
        let logger = Logger(sink: sink, clock: clock).with("request.id", "abc")
        logger.debug("not written")
        logger.info("hello", ["http.status": 200])
        logger.error("second \"quoted\"\nline")
        let lines = try FileIO.readString(path).split(separator: "\n").map(String.init)
        #expect(lines.count == 2)
        let first = try JSON.parse(lines[0])
        #expect(first["msg"] == "hello")
        #expect(first["level"] == "info")
        #expect(first["ts"] == "1970-01-01T00:00:00.000Z")
        #expect(first["request.id"] == "abc")
        #expect(first["http.status"] == 200)
        #expect(try JSON.parse(lines[1])["msg"] == "second \"quoted\"\nline")
    }

    /// A request's logger batches its info and debug lines with the access lines; notice and
    /// above go out at once, after them, in the order given. The logger it came from is
    /// unchanged: its lines are written at once.
    @Test func aBatchingLoggerBuffersRoutineLinesOnly() throws {
        let path = "/tmp/fcgibilling-log-batching-\(getpid()).log"
        defer { unlink(path) }
        let sink = try LogSink(path: path, minimumLevel: .debug)
        let base = Logger(sink: sink, clock: FixedClock(Timestamp(millisecondsSinceEpoch: 0)))
        let request = base.with("request.id", "r1").batchingRoutineLines()
        func messages() throws -> [String] {
            try FileIO.readString(path).split(separator: "\n").map { try JSON.parse(String($0))["msg"]?.stringValue ?? "" }
        }
        request.info("webhook ingested")
        request.debug("detail")
        #expect(try messages() == [])
        request.notice("notable")
        #expect(try messages() == ["webhook ingested", "detail", "notable"])
        request.info("second")
        request.warning("refused")
        #expect(try messages() == ["webhook ingested", "detail", "notable", "second", "refused"])
        request.info("third")
        base.info("startup")
        #expect(try messages() == ["webhook ingested", "detail", "notable", "second", "refused", "third", "startup"])
        request.info("last")
        sink.flush()
        #expect(try messages().last == "last")
    }

    /// The reused access log line writes what a line built from scratch writes, in the same
    /// key order, with each emission's own values, and nothing below the sink's level.
    @Test func aReusedLineWritesTheSameLineWithFreshValues() throws {
        let path = "/tmp/fcgibilling-log-reused-\(getpid()).log"
        defer { unlink(path) }
        let sink = try LogSink(path: path, minimumLevel: .info)
        let logger = Logger(sink: sink, clock: FixedClock(Timestamp(millisecondsSinceEpoch: 1_000)))
            .with("process", "billing-fcgi").with("worker.socket", "/run/w-1.sock")
        let line = ReusedLogLine(
            logger: logger, message: "request",
            keys: [
                ("request.id", .string), ("http.status", .integer),
                ("outcome", .string),
            ])
        line.set(0, "r1")
        line.set(1, 200)
        line.set(2, "ok")
        line.emit(.info)
        line.set(0, "r2 \"quoted\" ü")
        line.set(1, 503)
        line.set(2, "unavailable")
        line.emit(.warning)
        line.emit(.debug)
        logger.log(.info, "request", fields: ["request.id": "r1", "http.status": 200, "outcome": "ok"])
        let lines = try FileIO.readString(path).split(separator: "\n").map(String.init)
        #expect(lines.count == 3)
        #expect(lines[0] == lines[2], "the reused line equals a line built from scratch")
        #expect(
            lines[0]
                == #"{"ts":"1970-01-01T00:00:01.000Z","level":"info","msg":"request","process":"billing-fcgi","worker.socket":"/run/w-1.sock","request.id":"r1","http.status":200,"outcome":"ok"}"#
        )
        let second = try JSON.parse(lines[1])
        #expect(second["level"] == "warning")
        #expect(second["request.id"] == "r2 \"quoted\" ü")
        #expect(second["http.status"] == 503)
        #expect(second["outcome"] == "unavailable")
    }

    /// Buffered lines (the access log's) wait until a flush, a size limit, or any other line,
    /// which they precede: the file keeps the order lines were given in. A reopen writes them
    /// to the file they were meant for.
    @Test func bufferedLinesKeepTheirOrderAndReachTheirFile() throws {
        let path = "/tmp/fcgibilling-log-buffered-\(getpid()).log"
        defer {
            unlink(path)
            unlink(path + ".1")
        }
        let sink = try LogSink(path: path)
        func line(_ text: String) -> [UInt8] { Array((text + "\n").utf8) }
        func content(_ p: String = path) throws -> String { try FileIO.readString(p) }
        sink.buffer(line("a1"))
        sink.buffer(line("a2"))
        #expect(try content() == "")
        sink.write(line("w1"))
        #expect(try content() == "a1\na2\nw1\n")
        sink.buffer(line("a3"))
        sink.flush()
        #expect(try content() == "a1\na2\nw1\na3\n")
        sink.buffer(line("a4"))
        #expect(rename(path, path + ".1") == 0)
        sink.reopen()
        sink.write(line("w2"))
        #expect(try content(path + ".1") == "a1\na2\nw1\na3\na4\n")
        #expect(try content() == "w2\n")
        let big = String(repeating: "x", count: LogSink.bufferedBytesLimit)
        sink.buffer(line(big))
        #expect(try content() == "w2\n" + big + "\n", "past the size limit the buffer is written at once")
    }
}
