/// Process-level events of the FastCGI layer (start, stop, accept failures) as a closure,
/// so the pool does not depend on where logs go. `sink(_:)` sends them to a `Logger`.
public enum ServerEvents {
    public typealias Level = LogLevel

    public typealias Sink = @Sendable (_ level: Level, _ message: String, _ fields: [String: String]) -> Void

    /// Events as JSON lines through `logger`, string fields sorted by key.
    public static func sink(_ logger: Logger) -> Sink {
        { level, message, fields in
            var object = JSONObject()
            for key in fields.keys.sorted() { object[key] = .string(fields[key]!) }
            logger.log(level, message, fields: object)
        }
    }

    /// JSON lines on standard error.
    public static let standardError: Sink = sink(.standardError)
}
