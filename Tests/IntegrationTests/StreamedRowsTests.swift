import Testing

@testable import Core

/// `DatabaseConnection.streamRows`: the rows come from the server as they are taken, not
/// from the client library's buffer, and are the same values `query` returns; a value longer
/// than the streamed buffer is read whole; a body that stops early and a statement stopped by
/// its time limit leave a usable session.
@Suite struct StreamedRowsTests {
    private static let createTable: SQLQuery = """
        CREATE TABLE t (
          id INT NOT NULL PRIMARY KEY, s VARCHAR(191) NULL, long_text LONGTEXT NULL, blob_value LONGBLOB NULL,
          ts DATETIME(3) NULL, dec_value DECIMAL(14,3) NULL, u BIGINT UNSIGNED NULL
        ) ENGINE=InnoDB
        """

    /// 3,000 rows, every tenth with a text and a blob longer than the streamed buffer (80 KiB
    /// and 70 KiB), every seventh with NULLs.
    private static func load(_ db: DatabaseConnection) throws {
        try db.execute(createTable)
        try db.execute(
            """
            INSERT INTO t (id, s, long_text, blob_value, ts, dec_value, u)
            SELECT seq, IF(seq % 7 = 0, NULL, CONCAT('row-', seq, '-é')),
              IF(seq % 10 = 0, REPEAT(CONCAT('x', seq % 10), 81920), CONCAT('t', seq)),
              IF(seq % 10 = 0, REPEAT(UNHEX('00FF'), 35840), IF(seq % 7 = 0, NULL, UNHEX(HEX(seq)))),
              IF(seq % 7 = 0, NULL, TIMESTAMP'2026-01-01 00:00:00.000' + INTERVAL seq SECOND),
              seq / 8, 18446744073709551615 - seq
            FROM seq_1_to_3000
            """)
    }

    @Test func aStreamedResultIsTheBufferedOne() throws {
        try withTestDatabase { (configuration, _) throws -> Void in
            let db = DatabaseConnection(configuration: configuration)
            let observer = DatabaseConnection(configuration: configuration)
            try Self.load(db)
            let sql: SQLQuery = "SELECT id, s, long_text, blob_value, ts, dec_value, u FROM t ORDER BY id"
            /// Whether the server is still sending the result (~45 MB, more than the socket holds).
            func stillSending() throws(DatabaseError) -> Bool {
                try observer.queryOne(
                    "SELECT COUNT(*) AS n FROM information_schema.PROCESSLIST WHERE INFO = \(sql.sql) AND ID <> CONNECTION_ID()"
                )?.int64("n") == 1
            }
            var bufferedWhileRead: Bool?
            var buffered: [[SQLValue]] = []
            try db.forEachRow(sql) { (row: SQLRow) throws(DatabaseError) in
                if bufferedWhileRead == nil { bufferedWhileRead = try stillSending() }
                buffered.append(row.values)
            }
            var streamedWhileRead: Bool?
            var streamed: [[SQLValue]] = []
            try db.streamRows(sql) { (row: SQLRow) throws(DatabaseError) in
                if streamedWhileRead == nil { streamedWhileRead = try stillSending() }
                streamed.append(row.values)
            }
            #expect(bufferedWhileRead == false, "the buffered result was read whole before its first row")
            #expect(streamedWhileRead == true, "the streamed result's first row came while the server was still sending")
            #expect(streamed.count == 3_000)
            #expect(streamed == buffered)
            let long = try #require(streamed.first { $0[0] == .int(10) })
            #expect(long[2] == .string(String(repeating: "x0", count: 81_920)))
            #expect(long[3] == .bytes(Array(repeating: [0x00, 0xFF], count: 35_840).flatMap { $0 }))
            // The same statement again, buffered then streamed: one cached statement serves both.
            #expect(try db.query(sql).map(\.values) == buffered)
        }
    }

    @Test func aBodyThatThrowsEndsTheReadAndTheSessionGoesOn() throws {
        struct Enough: Error {}
        try withTestConnection { db in
            try Self.load(db)
            var seen = 0
            let error = #expect(throws: DatabaseError.self) {
                try db.streamRows("SELECT id FROM t ORDER BY id") { _ throws(DatabaseError) in
                    seen += 1
                    if seen == 3 { throw DatabaseError.misuse("enough") }
                }
            }
            #expect(error?.kind == .misuse)
            #expect(seen == 3)
            #expect(db.isConnected)
            #expect(try db.queryOne("SELECT COUNT(*) AS n FROM t")?.int64("n") == 3_000)
            // Inside a transaction: the discarded rest does not end it.
            try db.transaction { db in
                var first: Int64?
                _ = try? db.streamRows("SELECT id FROM t ORDER BY id DESC") { (row: SQLRow) throws(DatabaseError) in
                    first = try row.int64("id")
                    throw DatabaseError.misuse("enough")
                }
                #expect(first == 3_000)
                try db.execute("UPDATE t SET s = 'changed' WHERE id = 1")
            }
            #expect(try db.queryOne("SELECT s FROM t WHERE id = 1")?.string("s") == "changed")
        }
    }

    @Test func aStreamedStatementPastTheLimitIsATimeout() throws {
        try withTestDatabase { (configuration, _) throws -> Void in
            var limited = configuration
            limited.readTimeoutSeconds = 1
            let db = DatabaseConnection(configuration: limited)
            var rows = 0
            let error = #expect(throws: DatabaseError.self) {
                try db.streamRows("SELECT seq, SLEEP(IF(seq = 5, 3, 0)) AS slept FROM seq_1_to_10") { _ in rows += 1 }
            }
            #expect(error?.isStatementTimeout == true, "\(String(describing: error))")
            #expect(error?.errno == 1969)
            #expect(rows < 10)
            #expect(db.isConnected, "the connection was not lost")
            var after: [Int64] = []
            try db.streamRows("SELECT seq FROM seq_1_to_3") { (row: SQLRow) throws(DatabaseError) in after.append(try row.int64("seq")) }
            #expect(after == [1, 2, 3])
        }
    }
}
