/// Prepared statements of one connection, keyed by SQL text (`SQLText`), bounded: when full, the least
/// recently used statement is closed. Emptied whenever the connection is dropped, because
/// statement ids die with the server session.
struct StatementCache {
    private struct Entry {
        var statement: PreparedStatement
        var lastUse: UInt64
    }

    let capacity: Int
    private var entries: [SQLText: Entry] = [:]
    private var clock: UInt64 = 0

    init(capacity: Int) { self.capacity = max(1, capacity) }

    var count: Int { entries.count }

    mutating func statement(for text: SQLText) -> PreparedStatement? {
        // One hash of the SQL text (a kilobyte for the inbox INSERT), not one per access.
        guard let index = entries.index(forKey: text) else { return nil }
        clock += 1
        entries.values[index].lastUse = clock
        return entries.values[index].statement
    }

    mutating func insert(_ statement: PreparedStatement) {
        if entries.count >= capacity, entries[statement.text] == nil,
            let oldest = entries.min(by: { $0.value.lastUse < $1.value.lastUse })?.key
        {
            entries[oldest] = nil
        }
        clock += 1
        entries[statement.text] = Entry(statement: statement, lastUse: clock)
    }

    mutating func remove(_ text: SQLText) { entries[text] = nil }

    mutating func removeAll() { entries.removeAll() }
}
