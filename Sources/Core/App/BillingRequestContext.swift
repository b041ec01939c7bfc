/// The request context of `billing-fcgi`: one per worker thread (never shared, so no
/// locking), carrying the request's own state: the thread's database connection, the
/// clock, the request's logger and log fields, its outcome, and the signed-in user (through
/// the process's token verifier). What the features need of the process they hold
/// themselves (`BillingRoutes` builds them).
final class BillingRequestContext: RequestContextProtocol, AuthenticatedRequestContext, DatabaseRequestContext,
    HealthCheck.Context
{
    let workerIndex: Int
    var clock: any BillingClock
    /// Who the request's user is: the process's verifier (nil: no token keys configured).
    private let tokenVerifier: IDTokenVerifier?
    /// The process's logger, which each request's own logger is made from.
    private let processLogger: Logger
    /// Where `observe(error:)` counts database failures.
    private let metrics: BillingMetrics
    /// This thread's own MariaDB connection (nil in a worker started without one).
    let database: DatabaseConnection?
    var databaseProbe: (() throws -> Void)?
    var outcome: String?
    private(set) var logger: Logger
    /// Fields every log line of the current request carries; reset by `beginRequest`.
    private(set) var logFields: [String: String] = [:]
    /// Receives failures that became a generic 500, with `logFields` and the error's debug text.
    private let reportUnexpected: (_ error: any Error, _ fields: [String: String]) -> Void

    init(
        workerIndex: Int = 0, clock: (any BillingClock)? = nil, services: BillingServices = .unconfigured(),
        database: DatabaseConnection? = nil, databaseProbe: (() throws -> Void)? = nil,
        reportUnexpectedError: ((_ error: any Error, _ fields: [String: String]) -> Void)? = nil
    ) {
        self.workerIndex = workerIndex
        self.clock = clock ?? services.clock
        self.tokenVerifier = services.tokenVerifier
        self.processLogger = services.logger
        self.metrics = services.metrics
        self.logger = services.logger
        self.database = database
        // One statement (not COM_PING): readiness means the SQL layer answers, and this is
        // the one-query route the benchmarks compare the real routes against.
        self.databaseProbe = databaseProbe ?? database.map { db in { _ = try db.queryOne("SELECT 1 AS ready") } }
        self.reportUnexpected = reportUnexpectedError ?? BillingRequestContext.reporter(services.logger)
    }

    func beginRequest(_ request: HTTPRequest) {
        // The request's info lines are batched with its access line (the worker pool flushes
        // them); a warning or error still goes out at once.
        logger = processLogger.with("request.id", .string(request.id)).batchingRoutineLines()
        outcome = nil
        logFields = [
            "request.id": request.id, "http.method": request.method.rawValue,
            "http.path": request.path, "worker.thread": String(workerIndex),
        ]
    }

    func observe(error: any Error) {
        metrics.databaseError(from: error)
    }

    func reportUnexpectedError(_ error: any Error) {
        reportUnexpected(error, logFields)
    }

    /// Logs unexpected failures: one error line with the request's fields and the error's
    /// debug text.
    static func reporter(_ logger: Logger) -> (_ error: any Error, _ fields: [String: String]) -> Void {
        { error, fields in
            var object = JSONObject()
            for key in fields.keys.sorted() { object[key] = .string(fields[key]!) }
            object["error.debug"] = .string(String(reflecting: error))
            logger.log(.error, "request failed unexpectedly", fields: object)
        }
    }

    // MARK: the request's own state

    /// The user id (`sub`) of the request's verified ID token; 401 for anything else, 501
    /// when no token keys are configured.
    func authenticatedUser(_ request: HTTPRequest) throws -> String {
        guard let verifier = tokenVerifier else {
            throw APIError.notConfigured("ID token verification is not configured (auth.keysUrl or auth.keysFile)")
        }
        guard let token = request.bearerToken else { throw AuthError(.missing) }
        return try verifier.verify(token, now: clock.now()).subject
    }

    /// This thread's database connection; 503 in a worker started without one.
    func requireDatabase() throws -> DatabaseConnection {
        guard let database else { throw APIError.unavailable("no database configured") }
        return database
    }
}
