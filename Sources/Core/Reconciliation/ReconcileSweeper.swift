import Glibc
import Synchronization

/// The sweeper thread of billing-rpc (SPEC §11): every `reconcile.sweepEverySeconds`, one
/// `ReconcileService.sweep` on its own database connection. `stop` lets a pull in progress
/// finish (its transaction commits or rolls back whole), skips the rest of the sweep and
/// joins the thread.
final class ReconcileSweeper: Sendable {
    private let service: ReconcileService
    private let makeConnection: @Sendable () -> DatabaseConnection
    private let everyMilliseconds: Int64
    private let stopped = Mutex<Bool>(false)
    private let thread = Mutex<PosixThread?>(nil)

    init(service: ReconcileService, everySeconds: Int, makeConnection: @escaping @Sendable () -> DatabaseConnection) {
        self.service = service
        self.everyMilliseconds = Int64(everySeconds) * 1000
        self.makeConnection = makeConnection
    }

    func start() throws {
        let started = PosixThread.start { [self] in run() }
        switch started {
        case .success(let t): thread.withLock { $0 = t }
        case .failure(let error): throw error
        }
    }

    func stop() {
        stopped.withLock { $0 = true }
        let t = thread.withLock { t -> PosixThread? in
            defer { t = nil }
            return t
        }
        t?.join()
    }

    private var isStopped: Bool { stopped.withLock { $0 } }

    private func run() {
        let db = makeConnection()
        while !isStopped {
            do {
                _ = try service.sweep(on: db, while: { !isStopped })
            } catch {
                service.logger.error("reconcile.sweep.failed", ["error.message": .string(String(describing: error))])
            }
            // Sleep in short steps so a stop is not kept waiting.
            var slept: Int64 = 0
            while slept < everyMilliseconds && !isStopped {
                sleepMilliseconds(min(100, everyMilliseconds - slept))
                slept += 100
            }
        }
    }
}
