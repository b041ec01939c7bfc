/// The refresh in the background and under the statement limit: billing-rpc's refresher, and
/// a chunk the limit stops derived again one subscription at a time.
extension SubscriptionStates {
    /// billing-rpc's background refresh: every `everySeconds`, `refresh` on a connection of its
    /// own, cut short when the daemon stops. A failure is logged and the next step tries again
    /// (the notes stay until a refresh commits).
    static func refresher(
        everySeconds: Int, clock: any BillingClock, logger: Logger,
        makeConnection: @escaping @Sendable () -> DatabaseConnection
    ) -> PeriodicService {
        PeriodicService(name: "stats refresher", intervalMilliseconds: Int64(everySeconds) * 1000) {
            let db = makeConnection()
            return { isStopping in
                do {
                    let done = try refresh(on: db, now: clock.now(), while: { !isStopping() })
                    if done.subscriptions + done.foldedOn > 0 {
                        logger.info(
                            "stats.refresh",
                            [
                                "subscriptions": .int(Int64(done.subscriptions)), "late": .int(Int64(done.late)),
                                "foldedOn": .int(Int64(done.foldedOn)),
                                "states": .int(Int64(done.states)), "pending": .int(done.pending),
                                "confined": .int(Int64(done.confined)),
                            ])
                    }
                } catch {
                    logger.error("stats.refresh.failed", ["error.message": .string(String(describing: error))])
                }
            }
        }
    }

    /// `derive` of a chunk, and when one of its statements outgrows the statement limit, of
    /// each of its subscriptions on its own: the chunk's writes are rolled back to a savepoint
    /// (a statement stopped by `max_statement_time` ends alone, its transaction goes on) and
    /// its subscriptions derived one by one. So a chunk that the limit stops does not stop
    /// every later refresh (and with it every `stats.*` call, which refreshes first); only a
    /// subscription that outgrows the limit by itself does, reported as the timeout it is.
    static func deriveConfined(
        _ subscriptions: [(id: String, noted: Noted)], environment env: String, keptPeriods: Int,
        into result: inout RefreshResult, on db: DatabaseConnection
    ) throws {
        guard subscriptions.count > 1 else {
            try derive(subscriptions, environment: env, keptPeriods: keptPeriods, into: &result, on: db)
            return
        }
        let before = result
        try db.execute("SAVEPOINT refresh_chunk")
        do {
            try derive(subscriptions, environment: env, keptPeriods: keptPeriods, into: &result, on: db)
        } catch let error as DatabaseError where error.isStatementTimeout {
            try db.execute("ROLLBACK TO SAVEPOINT refresh_chunk")
            result = before
            result.confined += 1
            for one in subscriptions { try derive([one], environment: env, keptPeriods: keptPeriods, into: &result, on: db) }
        }
    }
}
