import Glibc

/// Why the socket server could not start. `description` names the path and the system
/// error, which is what an operator needs to fix it.
struct RPCServerError: Error, Sendable, CustomStringConvertible {
    let description: String

    init(_ description: String) { self.description = description }

    /// `description` plus `strerror(errno)`.
    static func system(_ what: String, errno code: Int32) -> RPCServerError {
        RPCServerError("\(what): \(systemErrorMessage(code))")
    }
}

func systemErrorMessage(_ code: Int32) -> String {
    guard let message = strerror(code) else { return "errno \(code)" }
    return "\(String(cString: message)) (errno \(code))"
}
