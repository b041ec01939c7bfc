import CFCGI
import Glibc
import Synchronization

/// N POSIX threads accepting on one listener, each with its own `FCGX_Request` and its own
/// request context (the application's: where the thread's database connection lives).
///
/// Threads are started here, in Core, from a C entry point: closures written in
/// `main.swift` top-level code are main-actor isolated in Swift 6 and trap when run on
/// another thread.
final class FastCGIWorkerPool<Context: RequestContextProtocol>: Sendable, ProcessLifecycle.Service {
    typealias Configuration = FastCGIPoolConfiguration

    /// Builds a thread's context, on that thread, before it accepts anything.
    typealias ContextFactory = @Sendable (_ workerIndex: Int) throws -> Context

    private let listener: FastCGIListener
    private let configuration: Configuration
    private let router: Router<Context>
    private let makeContext: ContextFactory
    private let logger: Logger
    private let requestStop: @Sendable () -> Void
    private let stopping = Atomic<Bool>(false)
    private let failed = Atomic<Bool>(false)
    private let served = Atomic<Int>(0)
    private let threads = Mutex<[PosixThread]>([])
    /// Requests by route and status, latency, busy threads (nil: not counted).
    let metrics: WorkerMetrics?
    /// Receives one `request` line per answered request (nil: no access log).
    private let accessLog: Logger?
    private let flusher: PeriodicService?

    /// `requestStop` is called from a worker thread when the process should stop on its
    /// own (recycle, or a context that could not be built); by default it sends SIGTERM to
    /// this process so the main thread's `ProcessSignals.wait()` performs the normal stop.
    init(
        listener: FastCGIListener, configuration: Configuration, router: Router<Context>,
        logger: Logger = .standardError,
        requestStop: @escaping @Sendable () -> Void = ProcessSignals.requestStop,
        metrics: WorkerMetrics? = nil, accessLog: Logger? = nil,
        makeContext: @escaping ContextFactory
    ) {
        precondition(configuration.threads > 0, "a worker pool needs at least one thread")
        self.listener = listener
        self.configuration = configuration
        self.router = router
        self.logger = logger
        self.requestStop = requestStop
        self.makeContext = makeContext
        self.metrics = metrics
        self.accessLog = accessLog
        // The access lines wait in the sink's buffer at most 100 ms, even when idle.
        self.flusher = accessLog.map { log in
            PeriodicService(name: "access log flusher", intervalMilliseconds: Int64(LogSink.bufferedMillisecondsLimit)) {
                { _ in log.sink.flush() }
            }
        }
    }

    /// True when a thread could not start serving (its context factory threw).
    var hasFailed: Bool { failed.load(ordering: .acquiring) }
    var requestsServed: Int { served.load(ordering: .relaxed) }

    /// Starts the threads. Block the handled signals first (`ProcessLifecycle` does).
    func start() throws {
        try flusher?.start()
        for index in 0..<configuration.threads {
            switch PosixThread.start({ [self] in runThread(index: index) }) {
            case .success(let thread):
                threads.withLock { $0.append(thread) }
            case .failure(let error):
                stopAccepting()
                join()
                throw FastCGIError.thread("pthread_create failed", errno: error.errno)
            }
        }
    }

    /// Stops accepting and waits for every in-flight request to finish (the process
    /// skeleton's stop).
    func stop() {
        stopAccepting()
        join()
    }

    /// Stops accepting: sets libfcgi's shutdown flag and shuts the listening socket down,
    /// so idle threads return from `FCGX_Accept_r` and nginx's new connections are refused
    /// at once. Threads busy with a request finish it first. Idempotent.
    func stopAccepting() {
        guard !stopping.exchange(true, ordering: .acquiringAndReleasing) else { return }
        FCGX_ShutdownPending()
        listener.stopAccepting(threads: configuration.threads)
    }

    /// Waits for every thread to finish its in-flight request and exit.
    func join() {
        let started = threads.withLock { list in
            defer { list.removeAll() }
            return list
        }
        for thread in started { thread.join() }
        flusher?.stop()
        accessLog?.sink.flush()
    }

    private func runThread(index: Int) {
        let context: Context
        let request: FastCGIRequest
        do {
            context = try makeContext(index)
            request = try FastCGIRequest(listenDescriptor: listener.descriptor)
        } catch {
            logger.log(
                .critical, "worker thread cannot start", ["worker.thread": .int(Int64(index)), "error.debug": .string(String(reflecting: error))])
            failed.store(true, ordering: .releasing)
            requestStop()
            return
        }
        let accessLine = accessLog.map(Self.accessLine)
        while !stopping.load(ordering: .acquiring) {
            let status = request.accept()
            if status < 0 {
                if stopping.load(ordering: .acquiring) { break }
                // Not a shutdown: e.g. EMFILE. Back off instead of losing the thread.
                logger.error("FCGX_Accept_r failed", ["worker.thread": .int(Int64(index)), "error.code": .int(Int64(status))])
                usleep(100_000)
                continue
            }
            let started = monotonicMicroseconds()
            metrics?.busy.increment()
            let answered = handle(request, context: context)
            request.finish()
            let elapsed = monotonicMicroseconds() - started
            metrics?.busy.decrement()
            metrics?.served.add()
            metrics?.record(route: answered.route, status: answered.status, microseconds: elapsed)
            if let accessLine { logAccess(answered, microseconds: elapsed, context: context, to: accessLine) }
            let count = served.add(1, ordering: .relaxed).newValue
            if configuration.maxRequests > 0, count == configuration.maxRequests {
                logger.notice("max requests reached, recycling", ["worker.requests": .int(Int64(count))])
                requestStop()
            }
        }
    }

    /// What the access log and the metrics need of an answered request.
    private struct Answered {
        var id: String
        var method: String
        var path: String
        var route: String?
        var status: Int
        var outcome: String?
    }

    /// The access log line of one worker thread: its keys fixed, its values replaced per request.
    static func accessLine(_ logger: Logger) -> ReusedLogLine {
        ReusedLogLine(
            logger: logger, message: "request",
            keys: [
                ("request.id", .string), ("http.method", .string), ("http.route", .string), ("http.path", .string),
                ("http.status", .integer), ("duration.us", .integer), ("outcome", .string), ("worker.thread", .integer),
            ])
    }

    /// One JSON line per request: id, method, route pattern, path, status, latency, outcome.
    private func logAccess(_ answered: Answered, microseconds: Int, context: Context, to line: ReusedLogLine) {
        line.set(0, answered.id)
        line.set(1, answered.method)
        line.set(2, answered.route ?? WorkerMetrics.unmatchedRoute)
        line.set(3, answered.path)
        line.set(4, Int64(answered.status))
        line.set(5, Int64(microseconds))
        line.set(6, answered.outcome ?? (answered.status < 400 ? "ok" : "error"))
        line.set(7, Int64(context.workerIndex))
        line.emit(answered.status >= 500 ? .warning : .info)
    }

    private func handle(_ connection: FastCGIRequest, context: Context) -> Answered {
        let params = connection.params()
        let requestID = RequestID.forParams(params)
        let plan = RequestBodyPolicy.plan(contentLength: params["CONTENT_LENGTH"], limit: configuration.maxBodyBytes)
        var body: [UInt8] = []
        var refusal: APIError?
        switch plan {
        case .readExactly(let length):
            body = connection.read(upTo: length)
            let more = body.count == length && !connection.read(upTo: 1).isEmpty
            refusal = RequestBodyPolicy.verdict(plan: plan, received: body.count, moreInput: more)
        case .readToEnd(let limit):
            body = connection.read(upTo: limit + 1)
            refusal = RequestBodyPolicy.verdict(plan: plan, received: body.count, moreInput: false)
        case .reject(let error):
            refusal = error
        }
        let response: HTTPResponse
        let httpRequest = HTTPRequest(fastCGIParams: params, body: refusal == nil ? body : [], id: requestID)
        var outcome: String?
        let pattern: String?
        if let refusal {
            body = []
            _ = connection.discard(upTo: configuration.maxDrainBytes)
            response = .error(refusal)
            outcome = refusal.code
            pattern = metrics == nil && accessLog == nil ? nil : router.pattern(matching: httpRequest.path)
        } else {
            context.beginRequest(httpRequest)
            (response, pattern) = router.route(httpRequest, context: context)
            outcome = context.outcome
        }
        connection.write(FastCGIResponseEncoder.encode(response, requestID: requestID))
        return Answered(
            id: requestID, method: httpRequest.method.rawValue, path: httpRequest.path,
            route: pattern, status: response.status.code, outcome: outcome)
    }
}

/// How many threads a worker pool runs and what it accepts.
struct FastCGIPoolConfiguration: Sendable, Equatable {
    var threads: Int
    /// Largest accepted request body; a larger `CONTENT_LENGTH` is answered 413 unread.
    var maxBodyBytes: Int
    /// How much of a refused body is read and discarded so nginx can finish sending and
    /// read the 413; beyond it the connection is just closed.
    var maxDrainBytes: Int
    /// Recycle: after this many requests (process-wide) the process stops gracefully
    /// like on SIGTERM and its supervisor starts a fresh one. 0 disables it.
    var maxRequests: Int

    init(threads: Int = 4, maxBodyBytes: Int = 1 << 20, maxDrainBytes: Int = 16 << 20, maxRequests: Int = 0) {
        self.threads = threads
        self.maxBodyBytes = maxBodyBytes
        self.maxDrainBytes = maxDrainBytes
        self.maxRequests = maxRequests
    }
}
