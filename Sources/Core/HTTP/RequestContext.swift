/// What the HTTP layer needs of a request's context: the router and the FastCGI pool know
/// this protocol and nothing else of the application. The application's context (one per
/// worker thread, `App/BillingRequestContext`) conforms to it and carries the request's own
/// state; the routes hold what they need of the process (hummingbird v2's request context
/// and controllers).
///
/// Contexts are per thread and never shared, so they need no locking and are not `Sendable`.
protocol RequestContextProtocol: AnyObject, SendableMetatype {
    /// Index of the worker thread owning this context (0-based), for logs.
    var workerIndex: Int { get }
    /// What became of the current request, for its access-log line (`applied`,
    /// `duplicate`, an error code...). Handlers set it; the router sets the error code when
    /// a handler threw; reset by `beginRequest`.
    var outcome: String? { get set }
    /// Called before routing each request.
    func beginRequest(_ request: HTTPRequest)
    /// Sees every error a handler threw before it becomes a response (e.g. to count
    /// database failures).
    func observe(error: any Error)
    /// A failure that became the generic 500: logged with the request's fields.
    func reportUnexpectedError(_ error: any Error)
}
