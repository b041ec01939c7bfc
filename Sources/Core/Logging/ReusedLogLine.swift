import CJansson

/// One log line whose keys never change, kept by one thread and emitted again and again:
/// the jansson object is built once (`ts`, `level`, `msg`, the logger's metadata, then the
/// line's own keys) and each emission only replaces the values in place before one dump.
/// Built from scratch, the per-request access line would weigh as much as a cheap request's
/// own work (docs/performance.md); the line written is the same. Lines go
/// through the sink's buffer (`LogSink.buffer`): the caller flushes it.
///
/// Not Sendable: one per thread (the worker pool makes one per worker thread).
final class ReusedLogLine {
    private let logger: Logger
    private let root: UnsafeMutablePointer<json_t>
    private let timestamp: UnsafeMutablePointer<json_t>
    private let level: UnsafeMutablePointer<json_t>
    /// The line's own fields, in the order given at creation.
    private var fields: [UnsafeMutablePointer<json_t>] = []

    enum Kind { case string, integer }

    /// - Parameter keys: the line's own fields after the metadata, each a string or integer.
    init(logger: Logger, message: String, keys: [(String, Kind)]) {
        self.logger = logger
        let root = json_object()!
        self.root = root
        func add(_ key: String, _ value: UnsafeMutablePointer<json_t>) -> UnsafeMutablePointer<json_t> {
            var key = key
            key.withUTF8 { buffer in
                buffer.withMemoryRebound(to: CChar.self) { _ = json_object_setn_new_nocheck(root, $0.baseAddress, $0.count, value) }
            }
            return value
        }
        timestamp = add("ts", JSON.string("").makeJansson())
        level = add("level", JSON.string("").makeJansson())
        _ = add("msg", JSON.string(message).makeJansson())
        for (key, value) in logger.metadata { _ = add(key, value.makeJansson()) }
        var values: [UnsafeMutablePointer<json_t>] = []
        for (key, kind) in keys {
            values.append(add(key, kind == .string ? JSON.string("").makeJansson() : json_integer(0)))
        }
        fields = values
    }

    deinit { cjansson_decref(root) }

    /// Sets field `index` (a string field).
    func set(_ index: Int, _ text: String) {
        var text = text
        text.withUTF8 { buffer in
            buffer.withMemoryRebound(to: CChar.self) { _ = json_string_setn_nocheck(fields[index], $0.baseAddress, $0.count) }
        }
    }

    /// Sets field `index` (an integer field).
    func set(_ index: Int, _ number: Int64) {
        _ = json_integer_set(fields[index], json_int_t(number))
    }

    /// Writes the line at `level` (skipped below the sink's minimum), with the time now.
    func emit(_ lineLevel: LogLevel) {
        guard lineLevel >= logger.sink.minimumLevel else { return }
        var now = logger.clock.now().iso8601
        now.withUTF8 { buffer in
            buffer.withMemoryRebound(to: CChar.self) { _ = json_string_setn_nocheck(timestamp, $0.baseAddress, $0.count) }
        }
        var name = lineLevel.rawValue
        name.withUTF8 { buffer in
            buffer.withMemoryRebound(to: CChar.self) { _ = json_string_setn_nocheck(level, $0.baseAddress, $0.count) }
        }
        var bytes = JSON.serialize(jansson: root)
        bytes.append(0x0A)
        logger.sink.buffer(bytes)
    }
}
