import Glibc

/// Where and how a worker process serves.
struct FastCGIServerOptions: Sendable, Equatable {
    /// Unix socket path (or `host:port`).
    var socketPath: String
    /// Mode of the socket file; nginx workers need read and write on it.
    var socketMode: UInt32
    var backlog: Int
    var pool: FastCGIPoolConfiguration
    /// The socket systemd passed (socket activation), used instead of creating one.
    var activation: SocketActivation?
    /// The nginx hosts allowed to connect when listening on TCP (libfcgi's
    /// `FCGI_WEB_SERVER_ADDRS`); required then, since any host reaching the port could
    /// otherwise speak FastCGI to the worker. Ignored for Unix sockets.
    var webServerAddresses: [String]

    init(
        socketPath: String, socketMode: UInt32 = 0o660, backlog: Int = 1024,
        pool: FastCGIPoolConfiguration = FastCGIPoolConfiguration(), activation: SocketActivation? = nil,
        webServerAddresses: [String] = []
    ) {
        self.socketPath = socketPath
        self.socketMode = socketMode
        self.backlog = backlog
        self.pool = pool
        self.activation = activation
        self.webServerAddresses = webServerAddresses
    }

    /// Opens (or takes from systemd) the listening socket. On TCP, exports the allowed web
    /// server addresses for libfcgi (read once, when the library initialises) and refuses to
    /// listen without any.
    func openListener() throws(FastCGIError) -> FastCGIListener {
        if !FastCGIListener.isUnixSocketPath(socketPath) {
            guard !webServerAddresses.isEmpty else {
                throw FastCGIError.socket(
                    "listening on TCP (\(socketPath)) needs server.webServerAddrs (or FCGI_WEB_SERVER_ADDRS): the addresses of the nginx hosts allowed to connect",
                    errno: 0)
            }
            setenv("FCGI_WEB_SERVER_ADDRS", webServerAddresses.joined(separator: ","), 1)
        }
        if let activation { return try FastCGIListener(inherited: activation, path: socketPath) }
        return try FastCGIListener(path: socketPath, backlog: backlog, mode: socketMode)
    }
}

/// The whole life of a `billing-fcgi` process, so `main.swift` only parses arguments and wires.
enum FastCGIServer {
    /// Listens, then runs the pool under the process skeleton (`ProcessLifecycle`): USR1/HUP
    /// call `reopenLogs`; TERM/INT/QUIT stop accepting, let in-flight requests finish, join
    /// the threads, close and unlink the socket. Returns the exit status: 0 after a graceful
    /// stop, 1 when start-up failed or a thread could not serve. Call it before starting any
    /// other thread.
    static func run<Context>(
        options: FastCGIServerOptions, router: Router<Context>, logger: Logger = .standardError,
        reopenLogs: () -> Void = {}, reload: () -> Void = {}, metrics: WorkerMetrics? = nil,
        accessLog: Logger? = nil,
        makeContext: @escaping FastCGIWorkerPool<Context>.ContextFactory
    ) -> Int32 {
        ProcessSignals.blockHandledSignals()
        let listener: FastCGIListener
        do {
            listener = try options.openListener()
        } catch {
            logger.log(.critical, "cannot listen", ["socket.path": .string(options.socketPath), "error.message": .string(error.description)])
            return 1
        }
        defer { listener.close() }
        let pool = FastCGIWorkerPool(
            listener: listener, configuration: options.pool, router: router,
            logger: logger, metrics: metrics, accessLog: accessLog, makeContext: makeContext)
        let status = ProcessLifecycle.run(pool, logger: logger, reopenLogs: reopenLogs, reload: reload) {
            logger.info(
                "worker started",
                [
                    "socket.path": .string(options.socketPath), "worker.threads": .int(Int64(options.pool.threads)),
                    "socket.activated": .bool(listener.isInherited), "process.id": .int(Int64(getpid())),
                ])
        }
        guard status == 0 else { return status }
        let failed = pool.hasFailed
        logger.log(failed ? .error : .info, "worker stopped", ["worker.requests": .int(Int64(pool.requestsServed))])
        return failed ? 1 : 0
    }
}
