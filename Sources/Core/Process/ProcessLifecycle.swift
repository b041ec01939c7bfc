import Glibc

/// The one process skeleton both daemons run (swift-service-lifecycle's `ServiceGroup`, in
/// its simplest form): signals blocked before any thread exists, the service started, the
/// main thread waiting for signals, then a graceful stop.
///
/// TERM, INT and QUIT drain (stop accepting, finish in-flight work, exit 0); USR1 reopens the
/// log file; HUP reopens it and reloads what can be reloaded (the ID-token keys), both
/// without interrupting service.
enum ProcessLifecycle {
    /// Something a daemon runs until it is told to stop.
    protocol Service {
        /// Starts serving on threads of its own; throws when it cannot.
        func start() throws
        /// Stops accepting, lets in-flight work finish, and returns once it has.
        func stop()
    }

    /// Runs `service` until a stop signal; returns the exit status (0 after a graceful
    /// stop, 1 when start-up failed). Call from the main thread before any other thread.
    /// - Parameters:
    ///   - reopenLogs: USR1 and HUP.
    ///   - reload: HUP, after reopening the logs: whatever else the daemon takes again
    ///     without a restart (the ID-token keys).
    ///   - started: after a successful start (e.g. the "started" log line).
    static func run(
        _ service: some Service, logger: Logger, reopenLogs: () -> Void, reload: () -> Void = {},
        started: () -> Void = {}
    ) -> Int32 {
        ProcessSignals.blockHandledSignals()
        do {
            try service.start()
        } catch {
            logger.log(.critical, "cannot start", ["error.message": .string(String(describing: error))])
            return 1
        }
        started()
        // Accepting now: systemd (Type=notify) may call the unit started.
        SystemdNotify.send("READY=1\nSTATUS=serving\nMAINPID=\(getpid())")
        while true {
            switch ProcessSignals.wait() {
            case .reopenLogs(let signal):
                logger.info("reopening logs", ["signal": .string(ProcessSignals.name(signal))])
                reopenLogs()
            case .reload(let signal):
                logger.info("reopening logs", ["signal": .string(ProcessSignals.name(signal))])
                reopenLogs()
                reload()
            case .stop(let signal):
                logger.info("stopping: refusing new work, finishing in-flight work", ["signal": .string(ProcessSignals.name(signal))])
                SystemdNotify.send("STOPPING=1\nSTATUS=draining in-flight work")
                service.stop()
                return 0
            }
        }
    }
}
