import Testing

@testable import Core

@Suite struct ErrorTests {
    /// A statement longer than the session's limit (just under `readTimeoutSeconds`) is
    /// stopped by the server and said to be a timeout, never "database unavailable", on a
    /// connection that stays usable; the admin socket answers -32001 `statement_timeout`.
    @Test func aStatementPastTheLimitIsATimeoutNotAnOutage() throws {
        try withTestDatabase { (configuration, _) throws -> Void in
            var limited = configuration
            limited.readTimeoutSeconds = 1
            let db = DatabaseConnection(configuration: limited)
            let error = #expect(throws: DatabaseError.self) { try db.query("SELECT SLEEP(3) AS slept") }
            #expect(error?.isStatementTimeout == true)
            #expect(error?.errno == 1969)
            #expect(error?.isUnavailable == false)
            #expect(error?.rpcError.code == RPCError.Code.timeout)
            #expect(error?.rpcError.data?["reason"] == "statement_timeout")
            #expect(error?.rpcError.message.contains("database.readTimeoutSeconds") == true)
            #expect(error?.apiError?.status == .serviceUnavailable)
            #expect(db.isConnected, "the connection was not lost")
            #expect(try db.queryOne("SELECT 1 AS one")?.int("one") == 1)
            // Under the limit, as before.
            #expect(try db.queryOne("SELECT SLEEP(0.2) AS slept")?.int("slept") == 0)
        }
    }

    @Test func duplicateKeyIsTypedAndHidesTheValue() throws {
        try withTestConnection { db in
            try db.execute("CREATE TABLE k (id INT PRIMARY KEY, code VARCHAR(64) NOT NULL, UNIQUE KEY k_code (code))")
            let secret = "secret-token-value-123"
            try db.execute("INSERT INTO k VALUES (1, \(secret))")
            let error = #expect(throws: DatabaseError.self) { try db.execute("INSERT INTO k VALUES (2, \(secret))") }
            #expect(error?.isDuplicateKey == true)
            #expect(error?.kind == .duplicateKey)
            #expect(error?.errno == 1062)
            #expect(error?.sqlState == "23000")
            #expect(error?.isUnavailable == false)
            #expect(error?.description.contains(secret) == false)
            // The server message (which quotes the value) is only in the debug description.
            #expect(error?.debugDescription.contains("1062") == true)
            // The connection and its cached statement stay usable.
            try db.execute("INSERT INTO k VALUES (2, \("other"))")
            #expect(try db.queryOne("SELECT COUNT(*) AS n FROM k")?.int("n") == 2)
        }
    }

    @Test func checkViolationIsTyped() throws {
        try withTestConnection { db in
            try db.execute(
                """
                CREATE TABLE c (id INT PRIMARY KEY, state VARCHAR(16) NOT NULL,
                  CONSTRAINT c_state_valid CHECK (state IN ('applied', 'ignored')))
                """)
            try db.execute("INSERT INTO c VALUES (1, \("applied"))")
            let error = #expect(throws: DatabaseError.self) { try db.execute("INSERT INTO c VALUES (2, \("bogus"))") }
            #expect(error?.isConstraintViolation == true)
            #expect(error?.errno == 4025)
        }
    }

    @Test func strictModeRefusesBadData() throws {
        try withTestConnection { db in
            try db.execute("CREATE TABLE s (id INT PRIMARY KEY, v VARCHAR(3) NOT NULL, n TINYINT NOT NULL)")
            let tooLong = #expect(throws: DatabaseError.self) { try db.execute("INSERT INTO s VALUES (1, \("abcd"), 1)") }
            #expect(tooLong?.kind == .invalidData)
            let outOfRange = #expect(throws: DatabaseError.self) { try db.execute("INSERT INTO s VALUES (1, \("abc"), \(1000))") }
            #expect(outOfRange?.kind == .invalidData)
            let notNull = #expect(throws: DatabaseError.self) { try db.execute("INSERT INTO s VALUES (1, \(String?.none), 1)") }
            #expect(notNull?.isConstraintViolation == true)
        }
    }

    @Test func invalidSQLAndBindMismatchAreTyped() throws {
        try withTestConnection { db in
            let syntax = #expect(throws: DatabaseError.self) { try db.query("SELEKT 1") }
            #expect(syntax?.kind == .invalidQuery)
            let unknown = #expect(throws: DatabaseError.self) { try db.query("SELECT * FROM no_such_table") }
            #expect(unknown?.kind == .invalidQuery)
            let mismatch = #expect(throws: DatabaseError.self) {
                try db.query(SQLQuery(unsafeSQL: "SELECT ? AS a, ? AS b", binds: [.int(1)]))
            }
            #expect(mismatch?.kind == .misuse)
            let ok = try db.queryOne("SELECT 1 AS ok")
            #expect(try ok?.int("ok") == 1)
        }
    }

    @Test func sessionSettingsAreApplied() throws {
        try withTestDatabase { configuration, _ in
            var configuration = configuration
            configuration.lockWaitTimeoutSeconds = 7
            let db = DatabaseConnection(configuration: configuration)
            #expect(db.isConnected == false)
            let row = try #require(
                try db.queryOne(
                    """
                    SELECT @@session.time_zone AS tz, @@session.innodb_lock_wait_timeout AS lw, @@session.sql_mode AS mode,
                           @@character_set_connection AS cs, @@character_set_client AS client, @@character_set_results AS results
                    """))
            #expect(db.isConnected)
            #expect(try row.string("tz") == "+00:00")
            #expect(try row.int("lw") == 7)
            #expect(try row.string("mode").contains("STRICT_ALL_TABLES"))
            #expect(try row.string("cs") == "utf8mb4")
            #expect(try row.string("client") == "utf8mb4")
            #expect(try row.string("results") == "utf8mb4")
        }
    }

    @Test func connectFailureIsUnavailable() throws {
        let environment = try TestEnvironment.load()
        var configuration = environment.configuration(database: "")
        configuration.socket = "/nonexistent/billing-test.sock"
        let db = DatabaseConnection(configuration: configuration)
        let error = #expect(throws: DatabaseError.self) { try db.ping() }
        #expect(error?.isUnavailable == true)
        #expect(error?.errno == 2002)
        let query = #expect(throws: DatabaseError.self) { try db.query("SELECT 1") }
        #expect(query?.isUnavailable == true)
    }
}
