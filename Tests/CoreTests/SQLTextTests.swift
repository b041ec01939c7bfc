import Testing

@testable import Core

/// The statement text as the cache sees it (`SQLText`) and column lookup by name
/// (`SQLColumns`): what the database layer builds on every statement run.
@Suite struct SQLTextTests {
    @Test func interpolationBuildsTheTextWithPlaceholdersAndKeepsTheBinds() {
        let user = "u-1"
        let ids: [SQLValue] = [.int(1), .int(2)]
        let nested: SQLQuery = "AND kind = \("renewal")"
        let query: SQLQuery = """
            SELECT \(unsafeRaw: "e.id, e.kind") FROM billing_events e
            WHERE e.user_id = \(user) AND e.id IN (\(list: ids)) AND e.tier IN (\(list: [])) \(nested)
            """
        #expect(
            query.sql == """
                SELECT e.id, e.kind FROM billing_events e
                WHERE e.user_id = ? AND e.id IN (?, ?) AND e.tier IN (NULL) AND kind = ?
                """)
        #expect(query.binds == [.string("u-1"), .int(1), .int(2), .string("renewal")])
        #expect(query.text == SQLText(query.sql))
        var appended: SQLQuery = "SELECT 1"
        appended.append(" WHERE x = \(5)")
        #expect(appended.sql == "SELECT 1 WHERE x = ?" && appended.binds == [.int(5)])
    }

    @Test func nonASCIIAndNonContiguousStringsAreCopiedAsUTF8() {
        var text = SQLText()
        text.append("SELECT 'é' AS ")
        let bridged = String(repeating: "ü", count: 3)
        text.append(bridged)
        text.append(ascii: UInt8(ascii: "?"))
        #expect(text.string == "SELECT 'é' AS üüü?")
        #expect(text.bytes == Array("SELECT 'é' AS üüü?".utf8))
    }

    /// Equal texts hash alike; texts that differ anywhere (a byte in the tail past the last
    /// whole word, the length alone) compare unequal, and the cache keeps them apart.
    @Test func equalityAndHashAgreeAtEveryLengthAndPosition() {
        let base = Array("SELECT a.revision, a.last_event_at FROM billing_access a WHERE a.user_id = ?".utf8)
        for length in 0...base.count {
            let prefix = String(decoding: base.prefix(length), as: UTF8.self)
            let one = SQLText(prefix)
            let two = SQLText(prefix)
            #expect(one == two)
            #expect(one.hashValue == two.hashValue)
            for position in 0..<length {
                var changed = Array(base.prefix(length))
                changed[position] = changed[position] == UInt8(ascii: "x") ? UInt8(ascii: "y") : UInt8(ascii: "x")
                #expect(SQLText(String(decoding: changed, as: UTF8.self)) != one)
            }
            if length > 0 { #expect(SQLText(String(decoding: base.prefix(length - 1), as: UTF8.self)) != one) }
        }
        var seen: Set<SQLText> = []
        for length in 0...base.count { seen.insert(SQLText(String(decoding: base.prefix(length), as: UTF8.self))) }
        #expect(seen.count == base.count + 1)
        #expect(SQLText("") == SQLText())
    }

    @Test func columnsAreFoundByExactNameAndTheFirstOfTwoWins() throws {
        let columns = SQLColumns(names: ["id", "provider_event_id", "provider", "id", "grace_expires_at", "", "é"])
        #expect(columns.index(of: "id") == 0)
        #expect(columns.index(of: "provider") == 2)
        #expect(columns.index(of: "provider_event_id") == 1)
        #expect(columns.index(of: "grace_expires_at") == 4)
        #expect(columns.index(of: "") == 5)
        #expect(columns.index(of: "é") == 6)
        #expect(columns.index(of: "provide") == nil)
        #expect(columns.index(of: "ID") == nil)
        #expect(columns.index(of: String(repeating: "x", count: 40)) == nil)
        let row = SQLRow(columns: columns, values: [.int(1), .string("e"), .string("revenuecat"), .int(2), .null, .null, .null])
        #expect(try row.int64("id") == 1)
        #expect(try row.string("provider") == "revenuecat")
        #expect(throws: DatabaseError.self) { try row.value("missing") }
    }
}
