/// The sweeper of billing-rpc (SPEC §11): every `reconcile.sweepEverySeconds`, one
/// `ReconcileService.sweep` on a database connection of its own. A stop lets a pull in
/// progress finish (its transaction commits or rolls back whole) and skips the rest of the
/// sweep.
enum ReconcileSweeper {
    static func service(
        _ reconcile: ReconcileService, everySeconds: Int, makeConnection: @escaping @Sendable () -> DatabaseConnection
    ) -> PeriodicService {
        PeriodicService(name: "reconcile sweeper", intervalMilliseconds: Int64(everySeconds) * 1000) {
            let db = makeConnection()
            return { isStopping in
                do {
                    _ = try reconcile.sweep(on: db, while: { !isStopping() })
                } catch {
                    reconcile.logger.error("reconcile.sweep.failed", ["error.message": .string(String(describing: error))])
                }
            }
        }
    }
}
