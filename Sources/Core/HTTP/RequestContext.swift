/// What a handler needs besides the request, one per worker thread (never shared between
/// threads, so it needs no locking and is deliberately not `Sendable`).
///
/// Built on the worker thread by the pool's context factory. It is a class so later layers
/// can add their per-thread resources as stored properties (the thread's database
/// connection, the configuration, the logger) without changing any handler signature.
public final class RequestContext {
    /// Index of the worker thread owning this context (0-based), for logs.
    public let workerIndex: Int
    public var clock: any BillingClock
    /// Process-wide configuration, logger and what was built from them at start-up.
    public let services: BillingServices
    /// This thread's own MariaDB connection (nil in a worker started without one).
    public let database: DatabaseConnection?
    /// Checks the database for `GET /health`; throws when it is unreachable. nil when the
    /// worker runs without a database.
    public var databaseProbe: (() throws -> Void)?
    /// Fields every log line of the current request carries (`request.id`, `http.method`,
    /// `http.path`); reset by `beginRequest`.
    public private(set) var logFields: [String: String] = [:]
    /// What became of the current request, for its access-log line (`applied`,
    /// `duplicate`, `allowed`, an error code...). Handlers set it; the router sets the error
    /// code when a handler threw; reset by `beginRequest`.
    public var outcome: String?
    /// The process logger carrying the current request's id (`request.id`).
    public private(set) var logger: Logger
    /// Receives failures that became a generic 500, with `logFields` and the error's
    /// debug text. Defaults to one JSON line on stderr until the logger is wired.
    public var reportUnexpectedError: (_ error: any Error, _ fields: [String: String]) -> Void

    public init(workerIndex: Int = 0, clock: any BillingClock = SystemClock(),
                services: BillingServices = .unconfigured(), database: DatabaseConnection? = nil,
                databaseProbe: (() throws -> Void)? = nil,
                reportUnexpectedError: @escaping (_ error: any Error, _ fields: [String: String]) -> Void = RequestContext.writeToStandardError) {
        self.workerIndex = workerIndex
        self.clock = clock
        self.services = services
        self.logger = services.logger
        self.database = database
        // One statement (not COM_PING): readiness means the SQL layer answers, and this is
        // the one-query route the benchmarks compare the real routes against.
        self.databaseProbe = databaseProbe ?? database.map { db in { _ = try db.queryOne("SELECT 1 AS ready") } }
        self.reportUnexpectedError = reportUnexpectedError
    }

    /// Called by the worker before routing each request.
    public func beginRequest(_ request: HTTPRequest) {
        logger = services.logger.with("request.id", .string(request.id))
        outcome = nil
        logFields = ["request.id": request.id, "http.method": request.method.rawValue,
                     "http.path": request.path, "worker.thread": String(workerIndex)]
    }

    public static func writeToStandardError(_ error: any Error, _ fields: [String: String]) {
        reporter(ServerEvents.standardError)(error, fields)
    }

    /// Reports unexpected failures to `events` (one error line with the request's fields and
    /// the error's debug text).
    public static func reporter(_ events: @escaping ServerEvents.Sink) -> (_ error: any Error, _ fields: [String: String]) -> Void {
        { error, fields in
            var fields = fields
            fields["error.debug"] = String(reflecting: error)
            events(.error, "request failed unexpectedly", fields)
        }
    }
}
