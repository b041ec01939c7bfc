/// Something the socket server wants logged. The executable decides where it goes; until
/// Core/Logging lands it prints `jsonLine` to stderr.
public struct RPCServerLogEvent: Sendable {
    public enum Level: String, Sendable {
        case debug, info, warning, error
    }

    public let level: Level
    /// Short and constant ("rpc.connection.refused"), so logs can be counted by message.
    public let message: String
    /// Dotted keys such as `rpc.socket` or `connection.peerPid`; never payloads.
    public let fields: JSONObject

    public init(_ level: Level, _ message: String, _ fields: JSONObject = [:]) {
        self.level = level
        self.message = message
        self.fields = fields
    }

    /// One JSON line: `{"level":...,"message":...,<fields>}`.
    public var jsonLine: String {
        var object: JSONObject = ["level": .string(level.rawValue), "message": .string(message)]
        for (key, value) in fields { object[key] = value }
        return JSON.object(object).serializedString()
    }
}

import Glibc

extension RPCServerLogEvent {
    /// Writes `jsonLine` to stderr in one `write`, so lines from threads never interleave.
    @Sendable public static func printToStandardError(_ event: RPCServerLogEvent) {
        let line = Array((event.jsonLine + "\n").utf8)
        _ = line.withUnsafeBytes { write(STDERR_FILENO, $0.baseAddress, $0.count) }
    }
}
