import Synchronization

/// A service that does one step of work every `interval` on a thread of its own: the one
/// shape of the daemons' background work (a worker's metrics publisher and token key
/// refresher, billing-rpc's reconcile sweeper, and next the outbox dispatcher).
///
/// The first step runs as soon as the thread starts. `stop` lets a step in progress finish
/// (a long step asks `isStopping` to cut itself short), wakes the pause between steps within
/// 100 ms and joins the thread, so nothing of the service runs once `stop` returns.
final class PeriodicService: ProcessLifecycle.Service, Sendable {
    /// One step; `isStopping` turns true once `stop` was called.
    typealias Step = (_ isStopping: () -> Bool) -> Void

    let name: String
    private let intervalMilliseconds: Int64
    /// Runs once on the service's thread and returns its step: what the step keeps between
    /// runs (a database connection, say) is created there and never leaves that thread.
    private let makeStep: @Sendable () -> Step
    private let stopping = Atomic<Bool>(false)
    private let thread = Mutex<PosixThread?>(nil)

    init(name: String, intervalMilliseconds: Int64, makeStep: @escaping @Sendable () -> Step) {
        self.name = name
        self.intervalMilliseconds = max(1, intervalMilliseconds)
        self.makeStep = makeStep
    }

    /// Starts the thread; throws when the system refuses one.
    func start() throws(PosixThreadError) {
        let started = PosixThread.start { [self] in run() }
        switch started {
        case .success(let t): thread.withLock { $0 = t }
        case .failure(let error): throw error
        }
    }

    func stop() {
        stopping.store(true, ordering: .releasing)
        let t = thread.withLock { t -> PosixThread? in
            defer { t = nil }
            return t
        }
        t?.join()
    }

    private var isStopping: Bool { stopping.load(ordering: .acquiring) }

    private func run() {
        let step = makeStep()
        while !isStopping {
            step { isStopping }
            // Short naps, so a stop is not kept waiting for the whole interval.
            let deadline = monotonicMilliseconds() + intervalMilliseconds
            while !isStopping {
                let left = deadline - monotonicMilliseconds()
                if left <= 0 { break }
                sleepMilliseconds(min(100, left))
            }
        }
    }
}
