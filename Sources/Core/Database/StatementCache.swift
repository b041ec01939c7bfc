/// Prepared statements of one connection, keyed by SQL text, bounded: when full, the least
/// recently used statement is closed. Emptied whenever the connection is dropped, because
/// statement ids die with the server session.
struct StatementCache {
    private struct Entry {
        var statement: PreparedStatement
        var lastUse: UInt64
    }

    let capacity: Int
    private var entries: [String: Entry] = [:]
    private var clock: UInt64 = 0

    init(capacity: Int) { self.capacity = max(1, capacity) }

    var count: Int { entries.count }

    mutating func statement(for sql: String) -> PreparedStatement? {
        // One hash of the SQL text (a kilobyte for the inbox INSERT), not one per access.
        guard let index = entries.index(forKey: sql) else { return nil }
        clock += 1
        entries.values[index].lastUse = clock
        return entries.values[index].statement
    }

    mutating func insert(_ statement: PreparedStatement) {
        if entries.count >= capacity, entries[statement.sql] == nil,
           let oldest = entries.min(by: { $0.value.lastUse < $1.value.lastUse })?.key {
            entries[oldest] = nil
        }
        clock += 1
        entries[statement.sql] = Entry(statement: statement, lastUse: clock)
    }

    mutating func remove(_ sql: String) { entries[sql] = nil }

    mutating func removeAll() { entries.removeAll() }
}
