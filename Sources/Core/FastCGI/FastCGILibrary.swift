import CFCGI
import Glibc

/// libfcgi's process-wide initialisation, done exactly once.
enum FastCGILibrary {
    /// `FCGX_Init` installs a no-op SIGPIPE handler and a SIGUSR1 handler that sets
    /// libfcgi's shutdown flag, but only where the disposition is still the default. SIGPIPE
    /// is ignored first (a client that went away must not kill the process); SIGUSR1 is
    /// blocked in every thread by `ProcessSignals` and consumed by `sigwait`, so libfcgi's
    /// handler never runs and USR1 keeps meaning "reopen logs".
    private static let status: Int32 = {
        signal(SIGPIPE, SIG_IGN)
        return FCGX_Init()
    }()

    static func initialize() throws(FastCGIError) {
        guard status == 0 else { throw FastCGIError.libraryInit(status) }
    }
}
