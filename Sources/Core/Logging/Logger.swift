import Glibc
import Synchronization

enum LogLevel: String, Sendable, Comparable, CaseIterable {
    case debug, info, notice, warning, error, critical

    private var rank: Int { LogLevel.allCases.firstIndex(of: self)! }
    static func < (lhs: LogLevel, rhs: LogLevel) -> Bool { lhs.rank < rhs.rank }
}

/// Where log lines go: a file opened O_APPEND (reopened on SIGUSR1 after rotation) or
/// standard error. One `write(2)` per line, under a lock, so lines never interleave.
///
/// Lines given to `buffer(_:)` (the access log's one line per request) may wait in memory
/// instead, and go out together in one `write(2)`: once `bufferedBytesLimit` bytes gather,
/// once `bufferedMillisecondsLimit` has passed since the oldest of them, before any other
/// line (so the file keeps the order lines were given in), before a reopen, and on `flush()`,
/// which the worker pool calls every 100 ms and when it stops, so no system call is on a
/// request's path; nginx's own access log buffers the same way. A request's own info lines (`webhook ingested`) are batched with
/// them (`Logger.batchingRoutineLines`). What a kill -9 can lose: the last 100 ms of those
/// lines, never a notice, warning or error, nor a line outside a request.
final class LogSink: Sendable {
    private struct State {
        var fd: Int32
        var path: String?
        var pending: [UInt8] = []
        var pendingSince: Int64 = 0
    }

    static let bufferedBytesLimit = 32 * 1024
    static let bufferedMillisecondsLimit: Int64 = 100

    private let state: Mutex<State>
    let minimumLevel: LogLevel

    /// Logs to `path`, or to standard error when nil.
    init(path: String?, minimumLevel: LogLevel = .info) throws(FileIO.Error) {
        self.minimumLevel = minimumLevel
        let fd = try LogSink.open(path)
        self.state = Mutex(State(fd: fd, path: path))
    }

    static let standardError = try! LogSink(path: nil)

    private static func open(_ path: String?) throws(FileIO.Error) -> Int32 {
        guard let path else { return STDERR_FILENO }
        let fd = Glibc.open(path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0o640)
        guard fd >= 0 else { throw FileIO.Error(path: path, errno: errno) }
        return fd
    }

    /// Reopens the file (after logrotate moved it). Keeps the old descriptor on failure.
    func reopen() {
        state.withLock { state in
            LogSink.writePending(&state)
            guard let path = state.path, let fd = try? LogSink.open(path) else { return }
            if state.fd != STDERR_FILENO { close(state.fd) }
            state.fd = fd
        }
    }

    /// Writes `line` now (after any buffered lines).
    func write(_ line: [UInt8]) {
        state.withLock { state in
            LogSink.writePending(&state)
            LogSink.writeAll(line, to: state.fd)
        }
    }

    /// Writes `line` with the lines gathered since the last write, or keeps it for later
    /// (see the type's note).
    func buffer(_ line: [UInt8]) {
        let now = monotonicMilliseconds()
        state.withLock { state in
            if state.pending.isEmpty {
                state.pending.reserveCapacity(LogSink.bufferedBytesLimit + 1024)
                state.pendingSince = now
            }
            state.pending.append(contentsOf: line)
            if state.pending.count >= LogSink.bufferedBytesLimit || now - state.pendingSince >= LogSink.bufferedMillisecondsLimit {
                LogSink.writePending(&state)
            }
        }
    }

    /// Writes the buffered lines now.
    func flush() {
        state.withLock { LogSink.writePending(&$0) }
    }

    private static func writePending(_ state: inout State) {
        guard !state.pending.isEmpty else { return }
        writeAll(state.pending, to: state.fd)
        state.pending.removeAll(keepingCapacity: true)
    }

    private static func writeAll(_ bytes: [UInt8], to fd: Int32) {
        var offset = 0
        while offset < bytes.count {
            let n = bytes.withUnsafeBytes { Glibc.write(fd, $0.baseAddress! + offset, $0.count - offset) }
            if n < 0 && errno == EINTR { continue }
            if n <= 0 { return }
            offset += n
        }
    }

    deinit {
        state.withLock { state in
            LogSink.writePending(&state)
            if state.fd != STDERR_FILENO { close(state.fd) }
        }
    }
}

/// A JSON-lines logger: `{"ts":…,"level":…,"msg":…,"request.id":…,…}`. Values are plain
/// strings or numbers chosen by the caller; never pass payloads, tokens or secrets.
/// A value type: `with(_:_:)` returns a logger carrying extra metadata (e.g. the request id).
struct Logger: Sendable {
    let sink: LogSink
    private(set) var metadata: JSONObject
    let clock: any BillingClock
    /// Whether info and debug lines wait in the sink's buffer with the access lines
    /// (`batchingRoutineLines()`); notice and above are always written at once.
    private(set) var batchesRoutineLines = false

    init(sink: LogSink, metadata: JSONObject = [:], clock: any BillingClock = SystemClock()) {
        self.sink = sink
        self.metadata = metadata
        self.clock = clock
    }

    func with(_ key: String, _ value: JSON) -> Logger {
        var copy = self
        copy.metadata[key] = value
        return copy
    }

    /// This logger, with its info and debug lines batched like the access lines
    /// (`LogSink.buffer`): for a request's own lines (`webhook ingested`) in a worker, whose
    /// pool flushes the sink every 100 ms and when it stops, so they cost the request no
    /// `write(2)`. Lines of notice and above still go
    /// out at once, after whatever is buffered, so the file keeps the order lines were given in.
    func batchingRoutineLines() -> Logger {
        var copy = self
        copy.batchesRoutineLines = true
        return copy
    }

    func log(_ level: LogLevel, _ message: String, _ fields: KeyValuePairs<String, JSON> = [:]) {
        guard level >= sink.minimumLevel else { return }
        write(level, message) { line in for (key, value) in fields { line[key] = value } }
    }

    /// The same, with fields already gathered in an object.
    func log(_ level: LogLevel, _ message: String, fields: JSONObject) {
        guard level >= sink.minimumLevel else { return }
        write(level, message) { line in for (key, value) in fields { line[key] = value } }
    }

    private func write(_ level: LogLevel, _ message: String, _ addFields: (inout JSONObject) -> Void) {
        var line: JSONObject = ["ts": .string(clock.now().iso8601), "level": .string(level.rawValue), "msg": .string(message)]
        for (key, value) in metadata { line[key] = value }
        addFields(&line)
        var bytes = JSON.object(line).serialized()
        bytes.append(0x0A)
        if batchesRoutineLines && level <= .info { sink.buffer(bytes) } else { sink.write(bytes) }
    }

    /// A logger writing to standard error (before a log file is configured, and in tests).
    static let standardError = Logger(sink: .standardError)
    /// Writes nothing (tests, and servers built without a log).
    static let discarding = Logger(sink: try! LogSink(path: "/dev/null"), metadata: [:])

    func debug(_ message: String, _ fields: KeyValuePairs<String, JSON> = [:]) { log(.debug, message, fields) }
    func info(_ message: String, _ fields: KeyValuePairs<String, JSON> = [:]) { log(.info, message, fields) }
    func notice(_ message: String, _ fields: KeyValuePairs<String, JSON> = [:]) { log(.notice, message, fields) }
    func warning(_ message: String, _ fields: KeyValuePairs<String, JSON> = [:]) { log(.warning, message, fields) }
    func error(_ message: String, _ fields: KeyValuePairs<String, JSON> = [:]) { log(.error, message, fields) }
}
