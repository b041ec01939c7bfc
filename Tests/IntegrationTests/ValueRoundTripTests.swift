import Testing

@testable import Core

@Suite struct ValueRoundTripTests {
    private static let createTable: SQLQuery = """
        CREATE TABLE t (
          id INT NOT NULL PRIMARY KEY,
          i BIGINT NULL, u BIGINT UNSIGNED NULL, d DOUBLE NULL, s VARCHAR(191) NULL,
          txt TEXT NULL, big LONGTEXT NULL, b VARBINARY(255) NULL, bl LONGBLOB NULL,
          ts DATETIME(3) NULL, dec_value DECIMAL(14,3) NULL, flag TINYINT(1) NULL,
          j LONGTEXT NULL CHECK (j IS NULL OR JSON_VALID(j))
        ) ENGINE=InnoDB
        """

    @Test func everyBindTypeRoundTrips() throws {
        try withTestConnection { db in
            try db.execute(Self.createTable)
            let when = Timestamp(CivilDateTime(year: 2024, month: 2, day: 29, hour: 23, minute: 59, second: 59, millisecond: 999))
            let bytes: [UInt8] = [0, 1, 2, 0xFF, 0xFE, 0, 0x80]
            let json: JSON = .object(["a": .int(1), "b": .array([.string("x"), .null, .bool(true)])])
            try db.execute(
                """
                INSERT INTO t (id, i, u, d, s, txt, big, b, bl, ts, dec_value, flag, j)
                VALUES (1, \(Int64.min), \(UInt64.max), \(-1.5e300), \(""), \("text"), \("big"), \(bytes), \(bytes),
                        \(when), \(SQLValue.string("12345678901.125")), \(true), \(json))
                """)
            try db.execute(
                """
                INSERT INTO t (id, i, u, d, s, txt, big, b, bl, ts, dec_value, flag, j)
                VALUES (2, \(Int64.max), \(UInt64(0)), \(0.1), \("x"), \(String?.none), \(SQLValue.null), \([UInt8]()),
                        \([UInt8]?.none), \(Timestamp?.none), \(SQLValue.null), \(false), \(JSON?.none))
                """)
            try db.execute("INSERT INTO t (id, i, u, d) VALUES (3, \(Int?.none), \(Int64?.none), \(Double?.none))")

            let rows = try db.query("SELECT * FROM t ORDER BY id")
            #expect(rows.count == 3)
            let r1 = rows[0]
            let r2 = rows[1]
            let r3 = rows[2]
            #expect(r1["i"] == .int(Int64.min))
            #expect(r1["u"] == .uint(UInt64.max))
            #expect(r1["d"] == .double(-1.5e300))
            #expect(r1["s"] == .string(""))
            #expect(r1["txt"] == .string("text"))
            #expect(r1["b"] == .bytes(bytes))
            #expect(r1["bl"] == .bytes(bytes))
            #expect(r1["ts"] == .timestamp(when))
            #expect(r1["dec_value"] == .string("12345678901.125"))
            #expect(try r1.double("dec_value") == 12345678901.125)
            #expect(try r1.bool("flag"))
            #expect(try r1.json("j") == json)
            #expect(try r1.timestamp("ts") == when)
            #expect(try r1.int64("i") == Int64.min)
            #expect(try r1.uint64("u") == UInt64.max)

            #expect(r2["i"] == .int(Int64.max))
            #expect(r2["u"] == .uint(0))
            #expect(try r2.int64("u") == 0)
            #expect(r2["d"] == .double(0.1))
            #expect(r2["b"] == .bytes([]))
            #expect(try r2.bool("flag") == false)
            for column in ["txt", "big", "bl", "ts", "dec_value", "j"] { #expect(r2[column] == .null, "\(column)") }
            #expect(try r2.optionalString("txt") == nil)
            #expect(try r2.optionalTimestamp("ts") == nil)
            #expect(try r2.optionalJSON("j") == nil)
            for column in ["i", "u", "d", "s", "ts"] { #expect(r3[column] == .null, "\(column)") }
            #expect(try r3.optionalInt64("i") == nil)
        }
    }

    @Test func expressionColumnsAreTyped() throws {
        try withTestConnection { db in
            let row = try #require(
                try db.queryOne(
                    """
                    SELECT 1 AS one, CAST(18446744073709551615 AS UNSIGNED) AS umax, NULL AS nothing, 2.5e0 AS dbl,
                           SUM(3) AS total, \(Int64(42)) AS bound, UTC_TIMESTAMP(3) AS now3, CONCAT('a', \("😀")) AS text
                    """))
            #expect(row["one"] == .int(1))
            #expect(row["umax"] == .uint(UInt64.max))
            #expect(row["nothing"] == .null)
            #expect(row["dbl"] == .double(2.5))
            #expect(try row.int64("total") == 3)
            #expect(try row.int64("bound") == 42)
            _ = try row.timestamp("now3")
            #expect(try row.string("text") == "a😀")
        }
    }

    @Test func utf8mb4RoundTripsInVarcharAndText() throws {
        try withTestConnection { db in
            try db.execute("CREATE TABLE u (id INT PRIMARY KEY, v VARCHAR(64) NOT NULL, t TEXT NOT NULL) DEFAULT CHARSET=utf8mb4")
            let text = "Zoë 😀 𝄞 𠜎 👩🏽‍💻 ñ — 中文"
            try db.execute("INSERT INTO u VALUES (1, \(text), \(text))")
            let row = try #require(try db.queryOne("SELECT v, t, CHAR_LENGTH(v) AS chars, HEX(t) AS hex FROM u WHERE v = \(text)"))
            #expect(try row.string("v") == text)
            #expect(try row.string("t") == text)
            // Stored as real utf8mb4 characters, not double-encoded bytes.
            #expect(try row.int("chars") == text.unicodeScalars.count)
            let hex = text.utf8.map { String($0, radix: 16, uppercase: true) }.map { $0.count == 1 ? "0" + $0 : $0 }.joined()
            #expect(try row.string("hex") == hex)
        }
    }

    @Test func largeTextRoundTrips() throws {
        try withTestConnection { db in
            try db.execute("CREATE TABLE big (id INT PRIMARY KEY, body LONGTEXT NOT NULL, raw LONGBLOB NOT NULL)")
            let unit = "é😀x{\"k\":1}"
            let body = String(repeating: unit, count: 3 * 1024 * 1024 / unit.utf8.count + 1)
            #expect(body.utf8.count > 3 * 1024 * 1024)
            let raw = [UInt8]((0..<(3 * 1024 * 1024)).map { UInt8(truncatingIfNeeded: $0 &* 31) })
            try db.execute("INSERT INTO big VALUES (1, \(body), \(raw)), (2, 'short', x'00')")
            let rows = try db.query("SELECT id, body, raw, LENGTH(body) AS octets FROM big ORDER BY id")
            #expect(try rows[0].string("body") == body)
            #expect(try rows[0].bytes("raw") == raw)
            #expect(try rows[0].int("octets") == body.utf8.count)
            #expect(try rows[1].string("body") == "short")
            #expect(try rows[1].bytes("raw") == [0])
        }
    }

    @Test func datetimeKeepsMillisecondsInUTC() throws {
        try withTestConnection { db in
            try db.execute("CREATE TABLE d (id INT PRIMARY KEY, at DATETIME(3) NOT NULL)")
            let samples: [Timestamp] = [
                Timestamp(millisecondsSinceEpoch: 0),
                Timestamp(millisecondsSinceEpoch: 1),
                Timestamp(millisecondsSinceEpoch: 1_709_251_199_999),
                Timestamp(millisecondsSinceEpoch: 1_764_419_144_123),
                Timestamp(iso8601: "9999-12-31T23:59:59.999Z")!,
                Timestamp(iso8601: "1000-01-01T00:00:00.001Z")!,
            ]
            for (index, sample) in samples.enumerated() {
                try db.execute("INSERT INTO d VALUES (\(index), \(sample))")
            }
            let rows = try db.query("SELECT id, at, DATE_FORMAT(at, '%Y-%m-%dT%H:%i:%s.%f') AS text FROM d ORDER BY id")
            #expect(rows.count == samples.count)
            for (row, sample) in zip(rows, samples) {
                #expect(try row.timestamp("at") == sample)
                // The server sees the same wall-clock UTC value (no session time zone shift).
                #expect(try row.string("text") + "Z" == String(sample.iso8601.dropLast()) + "000Z")
            }
            let epoch = try #require(try db.queryOne("SELECT UNIX_TIMESTAMP(at) * 1000 AS ms FROM d WHERE id = 3"))
            #expect(try epoch.int64("ms") == 1_764_419_144_123)
            let filtered = try db.query("SELECT id FROM d WHERE at > \(Timestamp(millisecondsSinceEpoch: 1_709_251_199_998)) ORDER BY id")
            #expect(try filtered.map { try $0.int("id") } == [2, 3, 4])
        }
    }

    @Test func queryBuildingAndRawFragments() throws {
        try withTestConnection { db in
            try db.execute("CREATE TABLE q (id INT PRIMARY KEY, name VARCHAR(32))")
            let hostile = "x'); DROP TABLE q; --"
            try db.execute("INSERT INTO q VALUES (1, \(hostile)), (2, 'b'), (3, 'c')")
            let column = "name"
            var query: SQLQuery = "SELECT id, \(unsafeRaw: column) FROM q WHERE id IN (\(list: [.int(1), .int(3)]))"
            query.append(" ORDER BY id")
            #expect(query.binds == [.int(1), .int(3)])
            let rows = try db.query(query)
            #expect(try rows.map { try $0.string("name") } == [hostile, "c"])
            #expect(try db.query("SELECT id FROM q WHERE id IN (\(list: []))").isEmpty)
            let raw = SQLQuery(unsafeSQL: "SELECT COUNT(*) AS n FROM q WHERE id > ?", binds: [.int(1)])
            #expect(try db.queryOne(raw)?.int("n") == 2)
            let result = try db.execute("UPDATE q SET name = 'z' WHERE id >= \(2)")
            #expect(result.affectedRows == 2)
        }
    }

    @Test func executeReportsInsertIDAndStatementCacheIsBounded() throws {
        try withTestDatabase { configuration, _ in
            let db = DatabaseConnection(configuration: configuration, statementCacheCapacity: 4)
            try db.execute("CREATE TABLE a (id BIGINT UNSIGNED AUTO_INCREMENT PRIMARY KEY, v INT)")
            let first = try db.execute("INSERT INTO a (v) VALUES (\(1))")
            let second = try db.execute("INSERT INTO a (v) VALUES (\(1))")
            #expect(first.lastInsertID == 1 && second.lastInsertID == 2 && first.affectedRows == 1)
            for n in 0..<10 {
                let row = try db.queryOne(SQLQuery(unsafeSQL: "SELECT \(n) AS n, COUNT(*) AS c FROM a"))
                #expect(try row?.int("n") == n)
            }
            #expect(db.cachedStatementCount == 4)
            #expect(try db.queryOne("SELECT COUNT(*) AS c FROM a")?.int("c") == 2)
        }
    }

    @Test func rowAccessorsThrowTypedErrors() throws {
        try withTestConnection { db in
            let row = try #require(try db.queryOne("SELECT 'abc' AS s, 5 AS n, NULL AS z"))
            #expect(row["missing"] == .null)
            let missing = #expect(throws: DatabaseError.self) { try row.string("missing") }
            #expect(missing?.kind == .columnNotFound)
            #expect(missing?.description.contains("missing") == true)
            let wrong = #expect(throws: DatabaseError.self) { try row.timestamp("s") }
            #expect(wrong?.kind == .typeMismatch)
            #expect(wrong?.description.contains("abc") == false)
            #expect(throws: DatabaseError.self) { try row.int64("s") }
            #expect(throws: DatabaseError.self) { try row.string("z") }
            #expect(throws: DatabaseError.self) { try row.json("s") }
        }
    }
}
