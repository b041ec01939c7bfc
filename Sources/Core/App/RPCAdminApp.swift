import Glibc

/// `billing-rpc`: the admin daemon, the migration command and the development token
/// printer, wired in Core so the executable is a single call.
public enum RPCAdminApp {
    static let version = BuildInfo.version

    /// Where the Debian package puts the configuration and the migrations: the defaults of
    /// `migrate` and `doctor` (BILLING_CONFIG, when set, names the configuration instead).
    static let packagedConfig = "/etc/fcgibilling/billing.json"
    static let packagedSQLDirectory = "/usr/share/fcgibilling/sql"

    static func defaultConfig(_ environment: [String: String]) -> String? {
        if let path = environment["BILLING_CONFIG"], !path.isEmpty { return path }
        return FileIO.exists(packagedConfig) ? packagedConfig : nil
    }

    static func defaultSQLDirectory() -> String? {
        FileIO.exists(packagedSQLDirectory) ? packagedSQLDirectory : nil
    }

    /// Returns the process exit status.
    public static func main(arguments: [String], environment: [String: String]) -> Int32 {
        switch arguments.first {
        case "--version", "-V":
            print(BuildInfo.versionLine("billing-rpc"))
            return 0
        case "migrate": return migrate(Array(arguments.dropFirst()), environment: environment)
        case "dev-token": return devToken(Array(arguments.dropFirst()))
        case "doctor": return doctor(Array(arguments.dropFirst()), environment: environment)
        case "config-merge": return configMerge(Array(arguments.dropFirst()))
        default: return serve(arguments, environment: environment)
        }
    }

    // MARK: serve

    static func serve(_ arguments: [String], environment: [String: String]) -> Int32 {
        let commandLine: RPCAdminCommandLine
        do {
            commandLine = try RPCAdminCommandLine.parse(arguments)
        } catch {
            return fail("\(error)\n\n\(RPCAdminCommandLine.usage)", status: 64)
        }
        if commandLine.showHelp {
            print(RPCAdminCommandLine.usage, terminator: "")
            return 0
        }
        var configuration = BillingConfiguration()
        let services: BillingServices
        let logger: Logger
        do {
            if commandLine.configPath != nil {
                configuration = try BillingConfiguration.load(path: commandLine.configPath, environment: environment)
            }
            let sink = try LogSink(path: commandLine.logFile ?? configuration.log.file, minimumLevel: configuration.log.level)
            logger = Logger(sink: sink, metadata: ["process": "billing-rpc"])
            services = try BillingServices(configuration: configuration, logger: logger)
        } catch {
            return fail("\(error)", status: 1)
        }
        var serverConfiguration = commandLine.serverConfiguration()
        serverConfiguration.socketPath = commandLine.socketPath ?? configuration.admin.socket
        do {
            serverConfiguration.peerPolicy = try RPCPeerPolicy.resolving(configuration.admin.allowedUsers)
        } catch {
            return fail("\(error)", status: 1)
        }
        if commandLine.configPath != nil {
            serverConfiguration.maxConnections = configuration.admin.maxConnections
            serverConfiguration.idleTimeoutSeconds = Double(configuration.admin.idleTimeoutSeconds)
        }
        let limits = RPCLimits(
            maxMessageBytes: configuration.admin.maxMessageBytes,
            maxBatchLength: configuration.admin.maxBatchLength)
        let server = makeServer(
            configuration: serverConfiguration, limits: limits, serverInfo: RPCServerInfo(version: version),
            services: services,
            databaseConfiguration: commandLine.configPath == nil ? nil : configuration.database)
        // Reconciliation's sweeper (SPEC §11), when the App Store Server API is configured;
        // started before the socket, stopped after it.
        var daemon: [any ProcessLifecycle.Service] = []
        if let reconcile = services.reconcile, configuration.reconcile.sweepEverySeconds > 0, commandLine.configPath != nil {
            let database = configuration.database
            daemon.append(
                ReconcileSweeper.service(
                    reconcile, everySeconds: configuration.reconcile.sweepEverySeconds,
                    makeConnection: { services.makeDatabaseConnection(database) }))
        }
        let sweeping = !daemon.isEmpty
        // The outbox's dispatcher (SPEC §16): its fan-out and retention, and one sender per
        // webhook endpoint.
        if commandLine.configPath != nil {
            let database = configuration.database
            daemon +=
                WebhookDispatcher(
                    configuration: configuration.webhooks, clock: services.clock, logger: logger,
                    makeConnection: { services.makeDatabaseConnection(database) }
                ).services() as [any ProcessLifecycle.Service]
            // The statistics' stored states (sql/025): the inbox's changes taken in every few
            // seconds, so that a report finds little left to derive.
            daemon.append(
                SubscriptionStates.refresher(
                    everySeconds: 5, clock: services.clock, logger: logger,
                    makeConnection: { services.makeDatabaseConnection(database) }))
            // Live changes for the app: each committed change to its user's nchan channel.
            if let socket = LivePublisherSocket(configuration.live) {
                daemon.append(
                    LivePublisher(
                        socket: socket, clock: services.clock, logger: logger,
                        makeConnection: { services.makeDatabaseConnection(database) }
                    ).service())
            }
        }
        daemon.append(server)
        let status = ProcessLifecycle.run(
            daemon, logger: logger, reopenLogs: { logger.sink.reopen() },
            reload: { services.reload() }
        ) {
            logger.info(
                "billing-rpc started",
                [
                    "rpc.socket": .string(serverConfiguration.socketPath), "process.id": .int(Int64(getpid())),
                    "reconcile.sweeper": .bool(sweeping), "webhook.endpoints": .int(Int64(configuration.webhooks.endpoints.count)),
                    "live.publisher": .bool(configuration.live.isEnabled),
                ])
        }
        guard status == 0 else { return status }
        logger.info("billing-rpc stopped")
        return 0
    }

    /// The daemon as `billing-rpc` runs it: handler failures and connection events go to the
    /// services' logger, each connection gets a context with `serverInfo`, the shared
    /// services and its own database connection.
    ///
    /// Closures handed to the server run on its threads; build them in Core (as here), not
    /// in `main.swift` top-level code, where Swift 6 makes them main-actor isolated.
    static func makeServer(
        configuration: RPCSocketServerConfiguration, limits: RPCLimits = .default,
        serverInfo: RPCServerInfo, services: BillingServices,
        databaseConfiguration: DatabaseConfiguration?
    ) -> RPCSocketServer<AdminRPCContext> {
        let logger = services.logger
        let registry = BillingRPCMethods.makeRegistry(services: services, server: serverInfo)
        let rpc = JSONRPCServerProtocol(registry: registry, limits: limits) { method, error in
            // The caller saw only "Internal error"; the operator gets the cause.
            logger.error("rpc.call.failed", ["rpc.method": .string(method), "error": .string(String(describing: error))])
        }
        let refusals = RefusalAudit()
        return RPCSocketServer(
            configuration: configuration, protocol: rpc,
            makeContext: { peer in
                // Built on the connection's thread: its database connection stays on that thread,
                // and every session it opens names the peer for the audit trigger (migration 011).
                let user = peer.flatMap { SystemUsers.name(of: $0.uid) }
                let session: [SQLQuery] = peer.map { ["SET @billing_peer_uid = \(Int64($0.uid)), @billing_peer_user = \(user)"] } ?? []
                return AdminRPCContext(
                    clock: services.clock, peer: peer,
                    database: databaseConfiguration.map { services.makeDatabaseConnection($0, sessionSetup: session) })
            }, logger: logger, onRefusedPeer: { context, peer in refusals.record(peer, context: context, logger: logger) })
    }

    // MARK: migrate

    static let migrateUsage = """
        usage: billing-rpc migrate [--config FILE] [--sql-dir DIR] [--status]

        Applies sql/NNN_name.sql files in order, forward-only, recording each with its SHA-256
        in schema_migrations. Re-running is a no-op; an applied file whose content changed is
        refused. --status lists every file and whether it is applied.
        Defaults: --config $BILLING_CONFIG, else /etc/fcgibilling/billing.json; --sql-dir
        /usr/share/fcgibilling/sql (the package's). Exit status: 0 applied or up to date,
        1 a migration failed (nothing of it stays), 75 the database cannot be reached, 64 usage.

        """

    static func migrate(_ arguments: [String], environment: [String: String]) -> Int32 {
        var config: String?
        var sqlDir: String?
        var statusOnly = false
        if let status = readOptions(
            arguments, usage: migrateUsage,
            { argument, words throws(CommandLineScanner.UsageError) in
                switch argument {
                case "--config": config = try words.value(argument)
                case "--sql-dir": sqlDir = try words.value(argument)
                case "--status": statusOnly = true
                default: return false
                }
                return true
            })
        {
            return status
        }
        guard let config = config ?? defaultConfig(environment), let sqlDir = sqlDir ?? defaultSQLDirectory() else {
            return fail("--config and --sql-dir are required\n\n\(migrateUsage)", status: 64)
        }
        do {
            let configuration = try BillingConfiguration.load(path: config, environment: environment)
            let database = DatabaseConnection(configuration: Migrator.connection(configuration.database))
            // Reaching the database is asked apart, so a script (the package's postinst) can
            // tell "not set up yet" (75) from "a migration failed" (1).
            do { _ = try database.queryOne("SELECT 1 AS one") } catch {
                return fail("migrate: cannot reach the database: \(error.debugDescription)", status: 75)
            }
            let migrator = Migrator(directory: sqlDir)
            if statusOnly {
                for entry in try migrator.status(using: database) { print("\(entry)") }
                return 0
            }
            let applied = try migrator.migrate(using: database)
            if applied.isEmpty {
                print("migrations: up to date")
            }
            for migration in applied {
                print("migrations: applied \(migration.version) \(migration.name) (sha256 \(migration.checksum.prefix(12))…)")
            }
            return 0
        } catch let error as DatabaseError {
            return fail("migrate: \(error.debugDescription)", status: 1)
        } catch {
            return fail("migrate: \(error)", status: 1)
        }
    }

    // MARK: dev-token

    static let devTokenUsage = """
        usage: billing-rpc dev-token --key PEM --kid KID --issuer ISS --audience AUD [--ttl SECONDS] USER_ID

        Prints an ID token for USER_ID signed with the development key (RS256 for an RSA key,
        ES256 for a P-256 key). Development only: production tokens come from the app's issuer.

        """

    static func devToken(_ arguments: [String]) -> Int32 {
        var values: [String: String] = [:]
        var user: String?
        var ttl: Int64 = 3600
        if let status = readOptions(
            arguments, usage: devTokenUsage,
            { argument, words throws(CommandLineScanner.UsageError) in
                switch argument {
                case "--key", "--kid", "--issuer", "--audience": values[argument] = try words.value(argument)
                case "--ttl": ttl = try words.integer(argument, in: 1...Int64(Int32.max))
                default:
                    guard user == nil, !argument.hasPrefix("--") else { return false }
                    user = argument
                }
                return true
            })
        {
            return status
        }
        guard let keyPath = values["--key"], let kid = values["--kid"], let issuer = values["--issuer"],
            let audience = values["--audience"], let user
        else {
            return fail("--key, --kid, --issuer, --audience and USER_ID are required\n\n\(devTokenUsage)", status: 64)
        }
        do {
            let key = try PrivateKey(pem: try FileIO.readString(keyPath))
            let algorithm: String
            switch try key.publicKey.kind {
            case .rsa: algorithm = "RS256"
            case .ec("prime256v1"): algorithm = "ES256"
            default: return fail("the key must be RSA or EC P-256", status: 1)
            }
            let now = SystemClock().now().millisecondsSinceEpoch / 1000
            let claims: JSON = [
                "iss": .string(issuer), "aud": .string(audience), "sub": .string(user),
                "iat": .int(now), "exp": .int(now + ttl),
            ]
            print(try CompactJWS.sign(payload: claims, header: ["kid": .string(kid)], key: key, algorithm: algorithm))
            return 0
        } catch {
            return fail("dev-token: \(error)", status: 1)
        }
    }

    // MARK: doctor

    static let doctorUsage = """
        usage: billing-rpc doctor [--config FILE] [--sql-dir DIR] [--url NGINX_BASE_URL] [--json]
                                  [--min-free-bytes N (1 GiB)] [--max-clock-skew-ms N (2000)]

        Defaults: --config $BILLING_CONFIG, else /etc/fcgibilling/billing.json; --sql-dir
        /usr/share/fcgibilling/sql; with the packaged configuration, --url http://127.0.0.1:9464
        (the site's metrics listener, which also answers the health route). Redirects are followed.

        Checks the installation, one line each, ✓ or ✗ with the fix: the configuration, the secret
        files (readable here, by no one else), the database (reachable, the runtime account's grants),
        the migrations (applied, checksums intact), the clock against the database's, the datadir's
        free space, the workers (their published state), the health route through nginx (--url),
        the ID-token keys and the App Store roots (loadable, not expiring within 14 days), the App
        Store API key. Exit status 0 when every check passes, 1 otherwise (64: usage). Reads only.

        """

    static func doctor(_ arguments: [String], environment: [String: String]) -> Int32 {
        var config: String?
        var sqlDir: String?
        var url: String?
        var asJSON = false
        var minimumFree: UInt64?
        var maxSkew: Int64?
        if let status = readOptions(
            arguments, usage: doctorUsage,
            { argument, words throws(CommandLineScanner.UsageError) in
                switch argument {
                case "--config": config = try words.value(argument)
                case "--sql-dir": sqlDir = try words.value(argument)
                case "--url": url = try words.value(argument)
                case "--json": asJSON = true
                case "--min-free-bytes": minimumFree = try words.integer(argument, in: 0...UInt64.max)
                case "--max-clock-skew-ms": maxSkew = try words.integer(argument, in: 0...Int64.max)
                default: return false
                }
                return true
            })
        {
            return status
        }
        guard let sqlDir = sqlDir ?? defaultSQLDirectory() else { return fail("--sql-dir is required\n\n\(doctorUsage)", status: 64) }
        let configPath = config ?? defaultConfig(environment)
        // The packaged site's local listener (metrics.listen) answers the health route over
        // plain HTTP: the doctor asks it there unless told another URL.
        let packaged = configPath == packagedConfig
        var doctor = Doctor(
            configPath: configPath, environment: environment, sqlDirectory: sqlDir,
            url: url ?? (packaged ? "http://127.0.0.1:9464" : nil))
        if let minimumFree { doctor.minimumFreeBytes = minimumFree }
        if let maxSkew { doctor.maxClockSkewMilliseconds = maxSkew }
        let checks = doctor.run()
        if asJSON {
            print(JSON.array(checks.map(\.json)).serializedString())
        } else {
            for check in checks { print(check.line) }
            let failed = checks.filter { !$0.ok }.count
            print(failed == 0 ? "all \(checks.count) checks pass" : "\(failed) of \(checks.count) checks fail")
        }
        return checks.allSatisfy(\.ok) ? 0 : 1
    }

    /// Reads a command's options, one word at a time, with `read`, which returns false for
    /// a word it does not know; `-h`/`--help` prints `usage`. Returns the status to exit
    /// with (0 after the help, 64 after a usage error), or nil to go on.
    private static func readOptions(
        _ arguments: [String], usage: String,
        _ read: (String, inout CommandLineScanner) throws(CommandLineScanner.UsageError) -> Bool
    ) -> Int32? {
        var words = CommandLineScanner(arguments)
        do throws(CommandLineScanner.UsageError) {
            while let argument = words.next() {
                if argument == "-h" || argument == "--help" {
                    print(usage, terminator: "")
                    return 0
                }
                guard try read(argument, &words) else { throw CommandLineScanner.unknown(argument) }
            }
        } catch {
            return fail("\(error.message)\n\n\(usage)", status: 64)
        }
        return nil
    }

    private static func fail(_ message: String, status: Int32) -> Int32 {
        ProcessEnvironment.printError("billing-rpc: \(message)")
        return status
    }
}
