/// Something the socket server wants logged. The executable decides where it goes
/// (`logger(_:)` sends it to a `Logger`).
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


extension RPCServerLogEvent {
    /// Sends events to `logger` as JSON lines.
    public static func logger(_ logger: Logger) -> @Sendable (RPCServerLogEvent) -> Void {
        { event in
            let level: LogLevel
            switch event.level {
            case .debug: level = .debug
            case .info: level = .info
            case .warning: level = .warning
            case .error: level = .error
            }
            logger.log(level, event.message, fields: event.fields)
        }
    }

    /// JSON lines on standard error.
    public static let printToStandardError: @Sendable (RPCServerLogEvent) -> Void = logger(.standardError)
}
