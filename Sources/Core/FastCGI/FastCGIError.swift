import Glibc

/// A failure setting up the FastCGI worker (library, socket, threads). Thrown at start-up
/// only; request-level problems become HTTP responses instead.
struct FastCGIError: Error, Sendable, Equatable, CustomStringConvertible {
    private enum Code: String, Sendable {
        case libraryInit = "fastcgi_init"
        case socket = "socket"
        case socketInUse = "socket_in_use"
        case thread = "thread"
    }

    private let code: Code
    let message: String
    /// `errno` at the failure, 0 when not applicable.
    let systemError: Int32

    private init(_ code: Code, _ message: String, systemError: Int32 = 0) {
        self.code = code
        self.message = message
        self.systemError = systemError
    }

    static func libraryInit(_ status: Int32) -> FastCGIError {
        FastCGIError(.libraryInit, "FCGX_Init failed with \(status)")
    }

    static func socket(_ message: String, errno: Int32) -> FastCGIError {
        FastCGIError(.socket, message, systemError: errno)
    }

    static func socketInUse(_ path: String) -> FastCGIError {
        FastCGIError(.socketInUse, "another process is already listening on \(path)")
    }

    static func thread(_ message: String, errno: Int32) -> FastCGIError {
        FastCGIError(.thread, message, systemError: errno)
    }

    var description: String {
        systemError == 0 ? message : "\(message): \(String(cString: strerror(systemError)))"
    }
}
