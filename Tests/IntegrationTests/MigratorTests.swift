import Foundation
import Testing

@testable import Core

/// A temporary copy of the repository's sql/ directory (or an empty one) that tests may edit.
private final class TemporarySQLDirectory {
    let path: String

    init(copying source: String?) throws {
        path = NSTemporaryDirectory() + "billing-sql-" + UUID().uuidString
        if let source {
            try FileManager.default.copyItem(atPath: source, toPath: path)
        } else {
            try FileManager.default.createDirectory(atPath: path, withIntermediateDirectories: true)
        }
    }

    func write(_ name: String, _ text: String) throws {
        try text.write(toFile: path + "/" + name, atomically: true, encoding: .utf8)
    }

    func append(_ name: String, _ text: String) throws {
        let existing = try String(contentsOfFile: path + "/" + name, encoding: .utf8)
        try write(name, existing + text)
    }

    deinit { try? FileManager.default.removeItem(atPath: path) }
}

@Suite struct MigratorTests {
    @Test func freshApplyThenRerunIsANoOp() throws {
        let sql = try TestEnvironment.sqlDirectory()
        let files = try FileManager.default.contentsOfDirectory(atPath: sql).filter { $0.hasSuffix(".sql") }.sorted()
        #expect(!files.isEmpty)
        try withTestConnection { db in
            let migrator = Migrator(directory: sql)
            #expect(try migrator.status(using: db).allSatisfy { $0.state == .pending })
            let applied = try migrator.migrate(using: db)
            #expect(applied.map(\.version) == Array(1...files.count))
            #expect(applied.first?.name == "initial")
            #expect(applied.allSatisfy { $0.checksum.count == 64 })
            #expect(try migrator.migrate(using: db).isEmpty)
            let status = try migrator.status(using: db)
            #expect(status.count == files.count)
            #expect(status.allSatisfy { if case .applied = $0.state { true } else { false } })
            let recorded = try db.query("SELECT version, name, checksum FROM schema_migrations ORDER BY version")
            #expect(try recorded.map { try $0.int("version") } == Array(1...files.count))
            for table in ["billing_users", "billing_events", "billing_event_user_candidates", "billing_quarantine"] {
                #expect(
                    try db.queryOne("SELECT COUNT(*) AS n FROM information_schema.tables WHERE table_schema = DATABASE() AND table_name = \(table)")?
                        .int("n") == 1, "\(table)")
            }
        }
    }

    @Test func schemaFollowsTheStorageConventions() throws {
        try withMigratedDatabase { db in
            let uncommentedTables = try db.query(
                """
                SELECT table_name AS name FROM information_schema.tables
                WHERE table_schema = DATABASE() AND (table_comment = '' OR engine <> 'InnoDB' OR table_collation NOT LIKE 'utf8mb4%')
                """)
            #expect(try uncommentedTables.map { try $0.string("name") } == [])
            // Views cannot carry column comments in MariaDB: docs/schema.md describes them.
            let uncommentedColumns = try db.query(
                """
                SELECT CONCAT(c.table_name, '.', c.column_name) AS name FROM information_schema.columns c
                JOIN information_schema.tables t ON t.table_schema = c.table_schema AND t.table_name = c.table_name
                WHERE c.table_schema = DATABASE() AND t.table_type = 'BASE TABLE' AND c.column_comment = ''
                """)
            #expect(try uncommentedColumns.map { try $0.string("name") } == [])
            let datetimes = try db.query(
                """
                SELECT CONCAT(table_name, '.', column_name) AS name FROM information_schema.columns
                WHERE table_schema = DATABASE() AND data_type IN ('datetime', 'timestamp') AND datetime_precision <> 3
                """)
            #expect(try datetimes.map { try $0.string("name") } == [])
            // Galera applies row events by primary key (docs/scaling.md): no table without one.
            let withoutPrimaryKey = try db.query(
                """
                SELECT t.table_name AS name FROM information_schema.tables t
                LEFT JOIN information_schema.table_constraints k ON k.table_schema = t.table_schema
                  AND k.table_name = t.table_name AND k.constraint_type = 'PRIMARY KEY'
                WHERE t.table_schema = DATABASE() AND t.table_type = 'BASE TABLE' AND k.constraint_name IS NULL
                """)
            #expect(try withoutPrimaryKey.map { try $0.string("name") } == [])
        }
    }

    @Test func initialSchemaEnforcesItsRules() throws {
        try withMigratedDatabase { db in
            let now = Timestamp(millisecondsSinceEpoch: 1_764_419_144_123)
            func insertEvent(
                id: String, status: String = "unmatched", user: String? = nil, kind: String = "purchase",
                payload: String = "{}"
            ) throws -> ExecuteResult {
                try db.execute(
                    """
                    INSERT INTO billing_events (provider, provider_event_id, user_id, event_type, kind, environment,
                                                received_at, status, payload)
                    VALUES ('revenuecat', \(id), \(user), 'INITIAL_PURCHASE', \(kind), 'production', \(now), \(status), \(payload))
                    """)
            }
            let first = try insertEvent(id: "evt-1")
            #expect(first.lastInsertID > 0)
            #expect((try? insertEvent(id: "evt-1")) == nil)
            #expect(throws: DatabaseError.self) { _ = try insertEvent(id: "evt-1") }
            let duplicate = #expect(throws: DatabaseError.self) { _ = try insertEvent(id: "evt-1") }
            #expect(duplicate?.isDuplicateKey == true)
            // Ids compare exactly (utf8mb4_bin): a different case is a different event.
            _ = try insertEvent(id: "EVT-1")
            for (id, status, user, kind, payload) in [
                ("e2", "weird", nil, "purchase", "{}"), ("e3", "applied", nil, "purchase", "{}"),
                ("e4", "unmatched", nil, "bogus", "{}"), ("e5", "unmatched", nil, "purchase", "{not json"),
            ] as [(String, String, String?, String, String)] {
                let error = #expect(throws: DatabaseError.self) {
                    _ = try insertEvent(id: id, status: status, user: user, kind: kind, payload: payload)
                }
                #expect(error?.isConstraintViolation == true, "\(id)")
            }
            try db.execute("INSERT INTO billing_event_user_candidates (candidate_id, event_id) VALUES (\("user-a"), \(first.lastInsertID))")
            let matches = try db.query(
                """
                SELECT e.id FROM billing_event_user_candidates c JOIN billing_events e ON e.id = c.event_id
                WHERE c.candidate_id = \("user-a") AND e.status = 'unmatched'
                """)
            #expect(try matches.map { try $0.uint64("id") } == [first.lastInsertID])
        }
    }

    @Test func changedChecksumIsRefusedNamingTheFile() throws {
        let directory = try TemporarySQLDirectory(copying: try TestEnvironment.sqlDirectory())
        try withTestConnection { db in
            let migrator = Migrator(directory: directory.path)
            _ = try migrator.migrate(using: db)
            try directory.append("001_initial.sql", "\n-- an innocent-looking edit\n")
            let error = #expect(throws: DatabaseError.self) { try migrator.migrate(using: db) }
            #expect(error?.kind == .migration)
            #expect(error?.description.contains("001_initial.sql") == true)
            let status = try migrator.status(using: db)
            #expect(status.first.map { if case .checksumMismatch = $0.state { true } else { false } } == true)
        }
    }

    /// An applied file amended with a `-- replaces sha256` line naming the text the database
    /// applied counts as applied (not run again, status applied); a line naming another text,
    /// an uppercase or short checksum, or none, is still refused.
    @Test func anAmendedFileNamingTheAppliedTextCountsAsApplied() throws {
        let directory = try TemporarySQLDirectory(copying: nil)
        let first = "CREATE TABLE a (id INT PRIMARY KEY COMMENT 'x') COMMENT='a';\nINSERT INTO a VALUES (1);\n"
        try directory.write("001_first.sql", first)
        try withTestConnection { db in
            let migrator = Migrator(directory: directory.path)
            #expect(try migrator.migrate(using: db).count == 1)
            let applied = SHA256.hexHash(Array(first.utf8))
            for wrong in [String(repeating: "0", count: 64), applied.uppercased(), String(applied.dropLast())] {
                try directory.write("001_first.sql", "-- replaces sha256 \(wrong)\nCREATE TABLE a (id INT PRIMARY KEY COMMENT 'y') COMMENT='a';\n")
                let error = #expect(throws: DatabaseError.self, "\(wrong)") { try migrator.migrate(using: db) }
                #expect(error?.description.contains("-- replaces sha256 \(applied)") == true)
            }
            try directory.write(
                "001_first.sql",
                "-- The insert was amended.\n-- replaces sha256 \(String(repeating: "1", count: 64))\n-- replaces sha256 \(applied)  \r\n"
                    + "CREATE TABLE a (id INT PRIMARY KEY COMMENT 'x') COMMENT='a';\nINSERT INTO a SELECT 1;\n")
            #expect(try migrator.migrate(using: db).isEmpty, "nothing runs again")
            #expect(try db.query("SELECT id FROM a").count == 1)
            let status = try migrator.status(using: db)
            #expect(status.first.map { if case .applied = $0.state { true } else { false } } == true)
            // A new database applies the amended text.
            try db.execute("DROP TABLE a")
            try db.execute("DELETE FROM schema_migrations")
            #expect(try migrator.migrate(using: db).count == 1)
            #expect(try db.query("SELECT id FROM a").count == 1)
        }
    }

    @Test func laterMigrationsApplyInOrder() throws {
        let directory = try TemporarySQLDirectory(copying: nil)
        try directory.write("001_first.sql", "CREATE TABLE a (id INT PRIMARY KEY COMMENT 'x') COMMENT='a';\nINSERT INTO a VALUES (1);\n")
        try withTestConnection { db in
            let migrator = Migrator(directory: directory.path)
            #expect(try migrator.migrate(using: db).map(\.version) == [1])
            try directory.write(
                "002_second.sql",
                "-- semicolons; in comments and 'strings;' are fine\nALTER TABLE a ADD COLUMN note VARCHAR(20) NOT NULL DEFAULT 'x;y' COMMENT 'has ; inside';\nINSERT INTO a (id) VALUES (2);"
            )
            try directory.write("003_third.sql", "INSERT INTO a (id, note) VALUES (3, 'three');")
            #expect(try migrator.migrate(using: db).map(\.name) == ["second", "third"])
            #expect(try db.query("SELECT note FROM a ORDER BY id").map { try $0.string("note") } == ["x;y", "x;y", "three"])
            #expect(try migrator.migrate(using: db).isEmpty)
        }
    }

    /// A migration's statement (an index or a backfill over a large inbox) is not held to the
    /// request paths' statement limit: on a connection whose limit is 0.5 s (a 1 s read
    /// timeout), a 1.5 s statement is stopped (1969), and on the same settings made a
    /// migration run's (`Migrator.connection`, as `billing-rpc migrate` connects) it is applied.
    @Test func aLongMigrationStatementIsNotStoppedAtTheRequestLimit() throws {
        let directory = try TemporarySQLDirectory(copying: nil)
        try directory.write("001_slow.sql", "CREATE TABLE a (id INT PRIMARY KEY);\nINSERT INTO a SELECT 1 FROM DUAL WHERE SLEEP(1.5) = 0;")
        try withTestDatabase { configuration, _ in
            var short = configuration
            short.readTimeoutSeconds = 1
            let stopped = #expect(throws: DatabaseError.self) {
                try Migrator(directory: directory.path).migrate(using: DatabaseConnection(configuration: short))
            }
            #expect(stopped?.errno == 1969)
            let db = DatabaseConnection(configuration: Migrator.connection(short))
            try db.execute("DROP TABLE IF EXISTS a")
            #expect(try Migrator(directory: directory.path).migrate(using: db).map(\.version) == [1])
            #expect(try db.query("SELECT id FROM a").map { try $0.int("id") } == [1])
        }
    }

    @Test func failingMigrationIsNotRecorded() throws {
        let directory = try TemporarySQLDirectory(copying: nil)
        try directory.write("001_ok.sql", "CREATE TABLE a (id INT PRIMARY KEY);")
        try directory.write("002_broken.sql", "INSERT INTO a VALUES (1);\nINSERT INTO nowhere VALUES (1);")
        try withTestConnection { db in
            let migrator = Migrator(directory: directory.path)
            let error = #expect(throws: DatabaseError.self) { try migrator.migrate(using: db) }
            #expect(error?.kind == .migration)
            #expect(error?.description.contains("002_broken.sql") == true)
            let versions = try db.query("SELECT version FROM schema_migrations").map { try $0.int("version") }
            #expect(versions == [1])
            // The connection is still usable for prepared statements afterwards.
            let count = try db.queryOne("SELECT COUNT(*) AS n FROM a")
            #expect(try count?.int("n") == 1)
            #expect(throws: DatabaseError.self) { try db.query("SELECT 1 AS a; SELECT 2 AS b") }
        }
    }

    @Test func gapAndDuplicateNumbersAreErrors() throws {
        let gap = try TemporarySQLDirectory(copying: nil)
        try gap.write("001_a.sql", "CREATE TABLE a (id INT PRIMARY KEY);")
        try gap.write("003_c.sql", "CREATE TABLE c (id INT PRIMARY KEY);")
        let duplicate = try TemporarySQLDirectory(copying: nil)
        try duplicate.write("001_a.sql", "CREATE TABLE a (id INT PRIMARY KEY);")
        try duplicate.write("001_b.sql", "CREATE TABLE b (id INT PRIMARY KEY);")
        let badName = try TemporarySQLDirectory(copying: nil)
        try badName.write("1-first.sql", "CREATE TABLE a (id INT PRIMARY KEY);")
        try withTestConnection { db in
            let gapError = #expect(throws: DatabaseError.self) { try Migrator(directory: gap.path).migrate(using: db) }
            #expect(gapError?.kind == .migration)
            #expect(gapError?.description.contains("003_c.sql") == true)
            let duplicateError = #expect(throws: DatabaseError.self) { try Migrator(directory: duplicate.path).migrate(using: db) }
            #expect(duplicateError?.description.contains("001_a.sql") == true)
            #expect(duplicateError?.description.contains("001_b.sql") == true)
            let nameError = #expect(throws: DatabaseError.self) { try Migrator(directory: badName.path).migrate(using: db) }
            #expect(nameError?.description.contains("1-first.sql") == true)
            let missing = #expect(throws: DatabaseError.self) { try Migrator(directory: gap.path + "/nope").migrate(using: db) }
            #expect(missing?.kind == .migration)
            // Nothing was applied by any of them.
            let tables = try db.query(
                "SELECT table_name FROM information_schema.tables WHERE table_schema = DATABASE() AND table_name IN ('a', 'b', 'c')")
            #expect(tables.isEmpty)
        }
    }

    @Test func concurrentMigratorsSerializeOnTheLock() throws {
        let sql = try TestEnvironment.sqlDirectory()
        try withTestDatabase { configuration, _ in
            let runs = (0..<3).map { _ in
                onThread { () throws -> Int in
                    try Migrator(directory: sql).migrate(using: DatabaseConnection(configuration: configuration)).count
                }
            }
            let counts = try runs.map { try $0() }
            let files = try FileManager.default.contentsOfDirectory(atPath: sql).filter { $0.hasSuffix(".sql") }.count
            #expect(counts.sorted() == [0, 0, files], "exactly one run applied everything")
        }
    }
}
