import Glibc

extension RPCSocketServer {
    /// Runs the server until SIGTERM or SIGINT, then stops it gracefully; returns the signal.
    /// Call from the main thread before any other thread exists.
    ///
    /// TERM, INT, HUP and USR1 are blocked here, before `start()` creates threads, so every thread
    /// inherits the mask and the signals are only ever taken by `sigwait` in this thread —
    /// no async-signal-safety concerns. SIGPIPE is ignored (writes use MSG_NOSIGNAL too).
    /// SIGUSR1 and SIGHUP call `reopenLogs` and keep serving.
    @discardableResult
    public func runUntilTerminated(reopenLogs: () -> Void = {}) throws(RPCServerError) -> Int32 {
        var signals = sigset_t()
        sigemptyset(&signals)
        for signal in [SIGTERM, SIGINT, SIGHUP, SIGUSR1] { sigaddset(&signals, signal) }
        pthread_sigmask(SIG_BLOCK, &signals, nil)
        signal(SIGPIPE, SIG_IGN)
        try start()
        while true {
            var received: Int32 = 0
            guard sigwait(&signals, &received) == 0 else { continue }
            if received == SIGHUP || received == SIGUSR1 {
                log(RPCServerLogEvent(.info, "rpc.reopening_logs"))
                reopenLogs()
                continue
            }
            log(RPCServerLogEvent(.info, "rpc.stopping", ["signal": .int(Int64(received))]))
            stop()
            return received
        }
    }
}
