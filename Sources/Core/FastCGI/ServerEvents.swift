import Glibc

/// Process-level events (start, stop, accept failures) as one JSON line each on stderr.
/// A stand-in with the same shape as the project logger (message + dotted keys), so the
/// logger can replace the sink without touching call sites.
public enum ServerEvents {
    public enum Level: String, Sendable {
        case debug, info, notice, warning, error, critical
    }

    public typealias Sink = @Sendable (_ level: Level, _ message: String, _ fields: [String: String]) -> Void

    /// Writes `{"level":...,"message":...,"time":...,<fields>}` and a newline with one
    /// `write(2)`, so lines from different threads do not interleave.
    public static let standardError: Sink = { level, message, fields in
        var object: JSONObject = ["time": .string(SystemClock().now().iso8601), "level": .string(level.rawValue),
                                  "message": .string(message)]
        for key in fields.keys.sorted() { object[key] = .string(fields[key]!) }
        var line = JSON.object(object).serialized()
        line.append(UInt8(ascii: "\n"))
        _ = line.withUnsafeBytes { write(STDERR_FILENO, $0.baseAddress, $0.count) }
    }
}
