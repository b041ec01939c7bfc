/// What a route that reads or writes the database needs of its request context: the worker
/// thread's own connection (503 when the worker has none), the clock and the request's
/// logger.
protocol DatabaseRequestContext: RequestContextProtocol {
    var clock: any BillingClock { get }
    /// The process logger carrying the current request's id.
    var logger: Logger { get }
    func requireDatabase() throws -> DatabaseConnection
}
