import Glibc

/// Where and how a worker process serves.
public struct FastCGIServerOptions: Sendable, Equatable {
    /// Unix socket path (or `host:port`).
    public var socketPath: String
    /// Mode of the socket file; nginx workers need read and write on it.
    public var socketMode: UInt32
    public var backlog: Int
    public var pool: FastCGIWorkerPool.Configuration

    public init(socketPath: String, socketMode: UInt32 = 0o660, backlog: Int = 1024,
                pool: FastCGIWorkerPool.Configuration = FastCGIWorkerPool.Configuration()) {
        self.socketPath = socketPath
        self.socketMode = socketMode
        self.backlog = backlog
        self.pool = pool
    }
}

/// The whole life of a `billing-fcgi` process, so `main.swift` only parses arguments and wires.
public enum FastCGIServer {
    /// Blocks the handled signals, listens, starts the pool, then waits for signals on the
    /// calling (main) thread: USR1/HUP call `reopenLogs`; TERM/INT/QUIT stop accepting,
    /// let in-flight requests finish, join the threads, close and unlink the socket.
    /// Returns the exit status: 0 after a graceful stop, 1 when start-up failed.
    /// Call it before starting any other thread.
    public static func run(options: FastCGIServerOptions, router: Router,
                           events: @escaping ServerEvents.Sink = ServerEvents.standardError,
                           reopenLogs: () -> Void = {},
                           metrics: WorkerMetrics? = nil, accessLog: Logger? = nil,
                           makeContext: @escaping FastCGIWorkerPool.ContextFactory) -> Int32 {
        ProcessSignals.blockHandledSignals()
        let listener: FastCGIListener
        do {
            listener = try FastCGIListener(path: options.socketPath, backlog: options.backlog, mode: options.socketMode)
        } catch {
            events(.critical, "cannot listen", ["socket.path": options.socketPath, "error.message": error.description])
            return 1
        }
        let pool = FastCGIWorkerPool(listener: listener, configuration: options.pool, router: router,
                                     events: events, metrics: metrics, accessLog: accessLog, makeContext: makeContext)
        do {
            try pool.start()
        } catch {
            events(.critical, "cannot start worker threads", ["error.message": error.description])
            listener.close()
            return 1
        }
        events(.info, "worker started", ["socket.path": options.socketPath, "worker.threads": String(options.pool.threads),
                                         "process.id": String(getpid())])
        while true {
            switch ProcessSignals.wait() {
            case .reopenLogs(let signal):
                events(.info, "reopening logs", ["signal": ProcessSignals.name(signal)])
                reopenLogs()
                continue
            case .stop(let signal):
                events(.info, "stopping: refusing new connections, finishing in-flight requests",
                       ["signal": ProcessSignals.name(signal)])
            }
            break
        }
        pool.stop()
        pool.join()
        listener.close()
        let failed = pool.hasFailed
        events(failed ? .error : .info, "worker stopped", ["worker.requests": String(pool.requestsServed)])
        return failed ? 1 : 0
    }

    /// A context factory for a worker without a database (the lead replaces it with one
    /// that opens the thread's connection). Defined in Core so the closure is not
    /// main-actor isolated.
    public static func contextFactory(clock: any BillingClock = SystemClock()) -> FastCGIWorkerPool.ContextFactory {
        { index in RequestContext(workerIndex: index, clock: clock) }
    }
}
