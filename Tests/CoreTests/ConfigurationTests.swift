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
            for key in ["database.port", "database.user", "server.threadsPerWorker", "binding.policy",
                        "products.p1", "users.idPattern", "reporting.currency", "revenucat: unknown key"] {
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
            unlink("\(dir)/config.json"); unlink("\(dir)/secret"); rmdir(dir)
        }
        try write("\(dir)/config.json", #"{"database": {"host": "db.example", "port": 3306}, "revenuecat": {"webhookSecretFile": "\#(dir)/secret"}}"#)
        try write("\(dir)/secret", "Bearer from-file\n")
        let config = try BillingConfiguration.load(path: "\(dir)/config.json", environment: [
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
        defer { unlink("\(dir)/config.json"); unlink("\(dir)/secret"); rmdir(dir) }
        try write("\(dir)/secret", "from-file\n")
        try write("\(dir)/config.json", #"{"revenuecat": {"webhookSecretFile": "/nonexistent/secret"}, "database": {"password": "base"}}"#)
        let inline = try BillingConfiguration.load(path: "\(dir)/config.json", environment: [
            "BILLING__revenuecat__webhookSecret": "Bearer inline",
            "BILLING__database__passwordFile": "\(dir)/secret",
        ])
        #expect(inline.revenuecat.webhookSecret == "Bearer inline", "the unreadable base file is no longer read")
        #expect(inline.database.password == "from-file")
        for (key, twin) in [("webhookSecret", "webhookSecretFile"), ("passwordFile", "password"), ("privateKeyFile", "privateKey")] {
            #expect(JSONObject.twin(of: key) == twin)
        }
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
}
