import Glibc
import Synchronization

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

/// The request-serving service of a `billing-fcgi` process: its listening socket and the
/// pool of threads accepting on it. `start` listens (or takes systemd's socket) and starts
/// the pool; `stop` stops accepting, lets in-flight requests finish, joins the threads,
/// closes and unlinks the socket.
final class FastCGIServer<Context: RequestContextProtocol>: ProcessLifecycle.Service, Sendable {
    let options: FastCGIServerOptions
    private let makePool: @Sendable (FastCGIListener) -> FastCGIWorkerPool<Context>
    private let running = Mutex<(listener: FastCGIListener, pool: FastCGIWorkerPool<Context>)?>(nil)

    init(
        options: FastCGIServerOptions, router: Router<Context>, logger: Logger = .standardError,
        metrics: WorkerMetrics? = nil, accessLog: Logger? = nil,
        makeContext: @escaping FastCGIWorkerPool<Context>.ContextFactory
    ) {
        self.options = options
        self.makePool = { listener in
            FastCGIWorkerPool(
                listener: listener, configuration: options.pool, router: router,
                logger: logger, metrics: metrics, accessLog: accessLog, makeContext: makeContext)
        }
    }

    func start() throws {
        let listener = try options.openListener()
        let pool = makePool(listener)
        do {
            try pool.start()
        } catch {
            listener.close()
            throw error
        }
        running.withLock { $0 = (listener, pool) }
    }

    func stop() {
        guard let (listener, pool) = running.withLock({ $0 }) else { return }
        pool.stop()
        listener.close()
    }

    /// Whether the socket came from systemd (false before `start`).
    var isSocketActivated: Bool { running.withLock { $0?.listener.isInherited } ?? false }
    /// True when a thread could not serve (its context factory threw).
    var hasFailed: Bool { running.withLock { $0?.pool.hasFailed } ?? false }
    var requestsServed: Int { running.withLock { $0?.pool.requestsServed } ?? 0 }
}
