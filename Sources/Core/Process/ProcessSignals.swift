import Glibc

/// What the main thread of a daemon was asked to do by a signal.
enum ProcessSignal: Sendable, Equatable {
    /// SIGTERM, SIGINT, SIGQUIT: stop accepting, finish in-flight work, exit 0.
    case stop(signal: Int32)
    /// SIGHUP: reload what a daemon can take again without a restart (its log file, the
    /// ID-token keys); other configuration changes need a restart (rolling, for workers:
    /// `scripts/workerctl`).
    case reload(signal: Int32)
    /// SIGUSR1: reopen logs (logrotate).
    case reopenLogs(signal: Int32)
}

/// Synchronous signal handling, the same for both daemons.
///
/// The handled signals are blocked in every thread and consumed by `sigwait` in the main
/// thread, so no handler runs asynchronously. This also keeps libfcgi's own SIGUSR1
/// handler (which would set its shutdown flag) from ever running, and a plain `kill`
/// cannot leave a half-stopped daemon behind.
enum ProcessSignals {
    static let handled: [Int32] = [SIGTERM, SIGINT, SIGQUIT, SIGHUP, SIGUSR1]

    /// Blocks the handled signals in the calling thread and ignores SIGPIPE (writes to a
    /// closed peer fail with EPIPE instead). Call it in the main thread before any other
    /// thread starts: threads inherit the mask.
    static func blockHandledSignals() {
        var set = handledSet()
        pthread_sigmask(SIG_BLOCK, &set, nil)
        signal(SIGPIPE, SIG_IGN)
    }

    /// Waits for the next handled signal.
    static func wait() -> ProcessSignal {
        var set = handledSet()
        while true {
            var number: Int32 = 0
            guard sigwait(&set, &number) == 0 else { continue }
            switch number {
            case SIGHUP: return .reload(signal: number)
            case SIGUSR1: return .reopenLogs(signal: number)
            default: return .stop(signal: number)
            }
        }
    }

    /// Wakes `wait()` as if an operator had sent SIGTERM (used for max-requests recycling
    /// and fatal start-up failures inside worker threads).
    static func requestStop() {
        kill(getpid(), SIGTERM)
    }

    static func name(_ signal: Int32) -> String {
        switch signal {
        case SIGTERM: return "SIGTERM"
        case SIGINT: return "SIGINT"
        case SIGQUIT: return "SIGQUIT"
        case SIGHUP: return "SIGHUP"
        case SIGUSR1: return "SIGUSR1"
        default: return "signal \(signal)"
        }
    }

    private static func handledSet() -> sigset_t {
        var set = sigset_t()
        sigemptyset(&set)
        for signal in handled { sigaddset(&set, signal) }
        return set
    }
}
