import Glibc

/// `billing-fcgi`: argument parsing and the wiring of one worker process, in Core so the
/// executable is a single call and closures run on worker threads are not main-actor
/// isolated (Swift 6 would make closures written in `main.swift` so, and they trap).
public enum WorkerApp {
    static let usage = """
        usage: billing-fcgi --config FILE --socket PATH [options]
               billing-fcgi --version

          --config FILE        configuration (JSON); BILLING__section__key env vars override it
          --socket PATH        Unix socket to listen on (nginx's upstream server unix:PATH), or HOST:PORT
                               (TCP: needs server.webServerAddrs or FCGI_WEB_SERVER_ADDRS). Under systemd
                               socket activation (billing-fcgi@.socket) the socket passed as LISTEN_FDS
                               is used and must be this one
          --log-file PATH      JSON-lines log (default: standard error); reopened on SIGUSR1
          --threads N          override server.threadsPerWorker
          --max-body BYTES     override server.maxBodyBytes
          --max-requests N     stop gracefully after N requests, for a supervisor to restart (default 0: never)
          --metrics-dir PATH   override server.metricsDirectory (default: metrics/ beside the socket)

        Signals: TERM/INT/QUIT stop accepting, finish in-flight requests and exit 0; USR1 reopens logs; HUP reopens logs
        and takes the ID-token keys again (auth.keysFile re-read, auth.keysUrl fetched) and the entitlement signing keys
        (entitlements.signingKeyFiles, the list and the files, read again).

        """

    struct Options {
        var config: String?
        var socket: String?
        var logFile: String?
        var threads: Int?
        var maxBody: Int?
        var maxRequests = 0
        var metricsDirectory: String?
    }

    /// Runs the worker; returns the process exit status (0 graceful stop, 1 start-up
    /// failure, 64 usage).
    public static func main(arguments: [String], environment: [String: String]) -> Int32 {
        var options = Options()
        var words = CommandLineScanner(arguments)
        do throws(CommandLineScanner.UsageError) {
            while let argument = words.next() {
                switch argument {
                case "-h", "--help":
                    print(usage, terminator: "")
                    return 0
                case "-V", "--version":
                    print(BuildInfo.versionLine("billing-fcgi"))
                    return 0
                case "--config": options.config = try words.value(argument)
                case "--socket": options.socket = try words.value(argument)
                case "--log-file": options.logFile = try words.value(argument)
                case "--threads": options.threads = try words.integer(argument, in: 1...256)
                case "--max-body": options.maxBody = try words.integer(argument, in: 1024...Int.max)
                case "--max-requests": options.maxRequests = try words.integer(argument, in: 0...Int.max)
                case "--metrics-dir": options.metricsDirectory = try words.value(argument)
                default: throw CommandLineScanner.unknown(argument)
                }
            }
        } catch {
            return usageError(error.message)
        }
        guard let socket = options.socket else { return usageError("--socket is required") }

        let configuration: BillingConfiguration
        let logger: Logger
        let services: BillingServices
        do {
            configuration = try BillingConfiguration.load(path: options.config, environment: environment)
            let sink = try LogSink(path: options.logFile ?? configuration.log.file, minimumLevel: configuration.log.level)
            logger = Logger(sink: sink, metadata: ["process": "billing-fcgi", "worker.socket": .string(socket)])
            services = try BillingServices(
                configuration: configuration, logger: logger, configurationSource: (options.config, environment))
        } catch {
            ProcessEnvironment.printError("billing-fcgi: \(error)")
            return 1
        }

        var serverOptions = FastCGIServerOptions(socketPath: socket)
        do {
            serverOptions.activation = try SocketActivation(environment: environment)
        } catch {
            logger.log(.critical, "cannot listen", ["socket.path": .string(socket), "error.message": .string(error.description)])
            return 1
        }
        let fromEnvironment =
            environment["FCGI_WEB_SERVER_ADDRS"].map {
                $0.split(separator: ",").map { $0.trimmingSpaces() }.filter { !$0.isEmpty }
            } ?? []
        serverOptions.webServerAddresses = configuration.server.webServerAddrs.isEmpty ? fromEnvironment : configuration.server.webServerAddrs
        serverOptions.socketMode = UInt32(configuration.server.socketMode)
        serverOptions.backlog = configuration.server.backlog
        serverOptions.pool.threads = options.threads ?? configuration.server.threadsPerWorker
        serverOptions.pool.maxBodyBytes = options.maxBody ?? configuration.server.maxBodyBytes
        serverOptions.pool.maxRequests = options.maxRequests

        // Metrics: counted in this process, published every second to the shared directory
        // (one file per worker), aggregated by whichever worker nginx sends /metrics to.
        var router = BillingRoutes.makeRouter(services: services)
        let directory = MetricsDirectory(
            path: options.metricsDirectory ?? configuration.server.metricsDirectory
                ?? MetricsDirectory.beside(socketPath: socket).path)
        let metrics = WorkerMetrics(
            worker: WorkerMetrics.workerName(socketPath: socket), threads: serverOptions.pool.threads,
            routes: router.patterns + [MetricsRoute.path], startedAt: services.clock.now(),
            domain: services.metrics)
        router.get(
            MetricsRoute.path,
            MetricsRoute.handler(
                own: metrics, directory: directory, clock: services.clock,
                database: { $0.database }))
        let publisher = MetricsPublisher(metrics: metrics, directory: directory, clock: services.clock)
        let databaseConfiguration = configuration.database
        let server = FastCGIServer(
            options: serverOptions, router: router, logger: logger, metrics: metrics, accessLog: logger,
            makeContext: { index in
                // One MariaDB connection per thread, opened lazily on first use.
                BillingRequestContext(
                    workerIndex: index, services: services,
                    database: services.makeDatabaseConnection(databaseConfiguration))
            })
        // Stopped in reverse: the pool drains first, the publisher removes its file last.
        // auth.keysUrl: the issuer's keys fetched now and kept fresh from here on.
        let daemon: [any ProcessLifecycle.Service] =
            [publisher] + (services.tokenVerifier?.keyStore.refresher().map { [$0] } ?? []) + [server]
        let status = ProcessLifecycle.run(daemon, logger: logger, reopenLogs: { logger.sink.reopen() }, reload: { services.reload() }) {
            logger.info(
                "worker started",
                [
                    "socket.path": .string(socket), "worker.threads": .int(Int64(serverOptions.pool.threads)),
                    "socket.activated": .bool(server.isSocketActivated), "process.id": .int(Int64(getpid())),
                ])
        }
        guard status == 0 else { return status }
        let failed = server.hasFailed
        logger.log(failed ? .error : .info, "worker stopped", ["worker.requests": .int(Int64(server.requestsServed))])
        return failed ? 1 : 0
    }

    private static func usageError(_ message: String) -> Int32 {
        ProcessEnvironment.printError("billing-fcgi: \(message)\n\(usage)")
        return 64
    }
}
