import Glibc

/// The one process skeleton both daemons run (swift-service-lifecycle's `ServiceGroup`, in
/// its simplest form): signals blocked before any thread exists, the services started in
/// order, the main thread waiting for signals, then a graceful stop of the services in
/// reverse order (a worker's request pool drains before its metrics publisher removes its
/// file; billing-rpc's socket closes before its sweeper's last pull ends).
///
/// TERM, INT and QUIT drain (stop accepting, finish in-flight work, exit 0); USR1 reopens the
/// log file; HUP reopens it and reloads what can be reloaded (the ID-token keys), both
/// without interrupting service.
enum ProcessLifecycle {
    /// Something a daemon runs until it is told to stop.
    protocol Service: Sendable {
        /// Starts serving on threads of its own; throws when it cannot.
        func start() throws
        /// Stops accepting, lets in-flight work finish, and returns once it has.
        func stop()
    }

    /// Runs `services` until a stop signal; returns the exit status (0 after a graceful
    /// stop, 1 when one could not start: those started before it are stopped again, in
    /// reverse order). Call from the main thread before any other thread exists: the signal
    /// mask is set here, once, and every thread the services start inherits it.
    /// - Parameters:
    ///   - reopenLogs: USR1 and HUP.
    ///   - reload: HUP, after reopening the logs: whatever else the daemon takes again
    ///     without a restart (the ID-token keys).
    ///   - started: after every service started (e.g. the "started" log line).
    static func run(
        _ services: [any Service], logger: Logger, reopenLogs: () -> Void, reload: () -> Void = {},
        started: () -> Void = {}
    ) -> Int32 {
        ProcessSignals.blockHandledSignals()
        guard let running = start(services, logger: logger) else { return 1 }
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
                stop(running)
                return 0
            }
        }
    }

    /// Starts `services` in order; when one cannot start, logs why, stops those already
    /// started (in reverse) and returns nil.
    static func start(_ services: [any Service], logger: Logger) -> [any Service]? {
        var running: [any Service] = []
        for service in services {
            do {
                try service.start()
            } catch {
                logger.log(
                    .critical, "cannot start",
                    ["service": .string(String(describing: type(of: service))), "error.message": .string(String(describing: error))])
                stop(running)
                return nil
            }
            running.append(service)
        }
        return running
    }

    /// Stops `services` in reverse order of their start.
    static func stop(_ services: [any Service]) {
        for service in services.reversed() { service.stop() }
    }
}
