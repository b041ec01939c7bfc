import Glibc

/// A migration the runner applied.
struct AppliedMigration: Sendable, Equatable {
    let version: Int
    let name: String
    let checksum: String
}

/// Where one migration stands.
struct MigrationStatus: Sendable, Equatable {
    enum State: Sendable, Equatable {
        case pending
        case applied(at: Timestamp)
        /// Applied, but the file changed since: the runner refuses to continue.
        case checksumMismatch(applied: String, file: String)
        /// Recorded in `schema_migrations` but no longer in the directory.
        case missingFile
    }

    let version: Int
    let name: String
    let state: State
}

/// Applies `sql/NNN_name.sql` in numeric order, forward-only, recording each in
/// `schema_migrations` with its SHA-256. Running it again is a no-op; an applied file whose
/// content changed, a gap or a duplicate number stops it with an error naming the file.
///
/// Two processes migrating at once serialize on the named lock `billing_migrations`. On a
/// Galera cluster (`wsrep_on`) that lock is local to one node, so the runner also claims the
/// one row of `schema_migrations_lock` (a lease written with an autocommit UPDATE: two nodes
/// claiming at once touch the same key and certification lets only one commit) and refuses
/// to run unless DDL replicates in total order (`wsrep_OSU_method = TOI`): docs/scaling.md.
/// MariaDB commits DDL implicitly, so a file is not atomic: a file that fails halfway is not
/// recorded and must be repaired by hand (write DDL that fails early, one concern per file).
/// Files are sent whole as one multi-statement batch (`CLIENT_MULTI_STATEMENTS` for that
/// call only): no `DELIMITER` lines; routine bodies with `BEGIN ... END` work as is.
struct Migrator: Sendable {
    /// How long one statement of a migration may run, and the client wait for it: an index
    /// or a backfill over a large inbox takes minutes (10M events, docs/performance.md), not
    /// the few seconds a request's statement may.
    static let statementSeconds = 86_400

    /// `configuration` with the statement limit and read and write timeouts of a migration run.
    static func connection(_ configuration: DatabaseConfiguration) -> DatabaseConfiguration {
        var c = configuration
        c.readTimeoutSeconds = statementSeconds
        c.writeTimeoutSeconds = statementSeconds
        return c
    }

    let directory: String
    /// Seconds to wait for another process's migration run to finish.
    var lockTimeoutSeconds: Int

    /// Seconds a cluster claim stays valid if its runner dies without releasing it.
    var leaseSeconds: Int

    init(directory: String, lockTimeoutSeconds: Int = 30, leaseSeconds: Int = 900) {
        self.directory = directory
        self.lockTimeoutSeconds = lockTimeoutSeconds
        self.leaseSeconds = leaseSeconds
    }

    /// Applies every pending migration; returns those applied by this call (empty when up to date).
    func migrate(using db: DatabaseConnection) throws(DatabaseError) -> [AppliedMigration] {
        let files = try MigrationFile.load(directory: directory)
        return try withMigrationLock(db) { () throws(DatabaseError) -> [AppliedMigration] in
            try createTable(db)
            let applied = try appliedRows(db)
            try verify(files: files, applied: applied)
            var done: [AppliedMigration] = []
            for file in files where applied[file.version] == nil {
                do throws(DatabaseError) {
                    try db.executeScript(unsafeSQL: file.sql)
                } catch {
                    throw DatabaseError.migration("\(file.fileName) failed (not recorded; repair by hand)", underlying: error)
                }
                try db.execute(
                    """
                    INSERT INTO schema_migrations (version, name, checksum, applied_at)
                    VALUES (\(file.version), \(file.name), \(file.checksum), UTC_TIMESTAMP(3))
                    """)
                done.append(AppliedMigration(version: file.version, name: file.name, checksum: file.checksum))
            }
            return done
        }
    }

    /// Every migration known to the directory or the database, by version. Reads only (the
    /// runtime account, which may not create tables, can ask too): no `schema_migrations`
    /// table yet means nothing is applied.
    func status(using db: DatabaseConnection) throws(DatabaseError) -> [MigrationStatus] {
        let files = try MigrationFile.load(directory: directory)
        let applied: [Int: AppliedRow]
        do {
            applied = try appliedRows(db)
        } catch  where error.errno == 1146 {
            applied = [:]
        }
        var result: [MigrationStatus] = []
        for file in files {
            let state: MigrationStatus.State
            if let row = applied[file.version] {
                state =
                    file.matches(row.checksum)
                    ? .applied(at: row.appliedAt)
                    : .checksumMismatch(applied: row.checksum, file: file.checksum)
            } else {
                state = .pending
            }
            result.append(MigrationStatus(version: file.version, name: file.name, state: state))
        }
        let known = Set(files.map(\.version))
        for (version, row) in applied where !known.contains(version) {
            result.append(MigrationStatus(version: version, name: row.name, state: .missingFile))
        }
        return result.sorted { $0.version < $1.version }
    }

    // MARK: - Steps

    private struct AppliedRow {
        let name: String
        let checksum: String
        let appliedAt: Timestamp
    }

    private func createTable(_ db: DatabaseConnection) throws(DatabaseError) {
        try db.execute(
            """
            CREATE TABLE IF NOT EXISTS schema_migrations (
              version INT NOT NULL COMMENT 'The NNN of sql/NNN_name.sql',
              name VARCHAR(191) NOT NULL COMMENT 'The name part of the file name',
              checksum CHAR(64) CHARACTER SET ascii COLLATE ascii_bin NOT NULL COMMENT 'SHA-256 (hex) of the file as applied; a changed file is refused',
              applied_at DATETIME(3) NOT NULL COMMENT 'When it was applied (UTC)',
              PRIMARY KEY (version)
            ) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin
              COMMENT='Applied schema migrations (forward-only), written by the migration runner'
            """)
    }

    private func appliedRows(_ db: DatabaseConnection) throws(DatabaseError) -> [Int: AppliedRow] {
        var applied: [Int: AppliedRow] = [:]
        for row in try db.query("SELECT version, name, checksum, applied_at FROM schema_migrations") {
            applied[try row.int("version")] = AppliedRow(
                name: try row.string("name"), checksum: try row.string("checksum"),
                appliedAt: try row.timestamp("applied_at"))
        }
        return applied
    }

    private func verify(files: [MigrationFile], applied: [Int: AppliedRow]) throws(DatabaseError) {
        for file in files {
            if let row = applied[file.version], !file.matches(row.checksum) {
                throw DatabaseError.migration(
                    "\(file.fileName) was changed after it was applied (checksum \(row.checksum.prefix(12))… in schema_migrations, \(file.checksum.prefix(12))… on disk); migrations are forward-only, add a new file instead (or, for an amended statement with the same effect, a line '-- replaces sha256 \(row.checksum)' in the file)"
                )
            }
        }
        let known = Set(files.map(\.version))
        if let unknown = applied.keys.filter({ !known.contains($0) }).min() {
            throw DatabaseError.migration(
                "the database has migration \(unknown) (\(applied[unknown]!.name)) which \(directory) does not contain; is this an older checkout?")
        }
    }

    private func withMigrationLock<R>(_ db: DatabaseConnection, _ body: () throws(DatabaseError) -> R) throws(DatabaseError) -> R {
        let row = try db.queryOne("SELECT GET_LOCK('billing_migrations', \(lockTimeoutSeconds)) AS locked")
        guard let row, try row.optionalInt64("locked") == 1 else {
            throw DatabaseError.migration("another process holds the migration lock (waited \(lockTimeoutSeconds) s)")
        }
        defer { _ = try? db.query("SELECT RELEASE_LOCK('billing_migrations')") }
        guard try Self.isClusterNode(db) else { return try body() }
        return try withClusterLease(db, body)
    }

    /// Whether the session replicates through Galera (`wsrep_on`; absent on a server built
    /// without wsrep).
    static func isClusterNode(_ db: DatabaseConnection) throws(DatabaseError) -> Bool {
        let row = try db.queryOne(
            """
            SELECT VARIABLE_VALUE AS value FROM information_schema.SESSION_VARIABLES WHERE VARIABLE_NAME = 'WSREP_ON'
            """)
        return try row?.string("value").uppercased() == "ON"
    }

    /// The cluster-wide guard: DDL must replicate in total order (TOI; under RSU it would
    /// change this node only), and one runner at a time holds the lease row.
    private func withClusterLease<R>(_ db: DatabaseConnection, _ body: () throws(DatabaseError) -> R) throws(DatabaseError) -> R {
        let method =
            try db.queryOne(
                """
                SELECT VARIABLE_VALUE AS value FROM information_schema.SESSION_VARIABLES WHERE VARIABLE_NAME = 'WSREP_OSU_METHOD'
                """)?.string("value") ?? "TOI"
        guard method.uppercased() == "TOI" else {
            throw DatabaseError.migration(
                "wsrep_OSU_method is \(method) on this Galera node: migrations need TOI so every node applies the DDL in the same order (docs/scaling.md)"
            )
        }
        try db.execute(
            """
            CREATE TABLE IF NOT EXISTS schema_migrations_lock (
              id TINYINT UNSIGNED NOT NULL COMMENT 'Always 1: the one lease row',
              holder VARCHAR(191) NULL COMMENT 'The migration run holding the lease (host, pid, random), NULL when free',
              expires_at DATETIME(3) NULL COMMENT 'When a run that died without releasing the lease loses it (UTC)',
              PRIMARY KEY (id)
            ) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin
              COMMENT='The migration runner''s cluster-wide lease on Galera, where GET_LOCK is local to one node'
            """)
        do {
            try db.execute("INSERT IGNORE INTO schema_migrations_lock (id) VALUES (1)")
        } catch  where error.isDeadlockOrLockWait {
            // Another runner inserted the row at the same instant: it exists now.
        }
        var hostname = [UInt8](repeating: 0, count: 256)
        gethostname(&hostname, hostname.count - 1)
        let host = String(decoding: hostname.prefix { $0 != 0 }, as: UTF8.self)
        let holder = "\(host) pid \(getpid()) \(UInt64.random(in: 1...UInt64.max))"
        let deadline = ContinuousClock.now.advanced(by: .seconds(lockTimeoutSeconds))
        while true {
            // One autocommit UPDATE: a claim racing another node's fails certification (1213)
            // or, retried by the server, finds the row taken.
            let claimed: Bool
            do {
                claimed =
                    try db.execute(
                        """
                        UPDATE schema_migrations_lock SET holder = \(holder), expires_at = UTC_TIMESTAMP(3) + INTERVAL \(leaseSeconds) SECOND
                        WHERE id = 1 AND (holder IS NULL OR expires_at < UTC_TIMESTAMP(3))
                        """
                    ).affectedRows == 1
            } catch  where error.isDeadlockOrLockWait {
                claimed = false
            }
            if claimed { break }
            if ContinuousClock.now >= deadline {
                throw DatabaseError.migration(
                    "another migration run holds the cluster lease (schema_migrations_lock; waited \(lockTimeoutSeconds) s)")
            }
            usleep(200_000)
        }
        defer {
            _ = try? db.execute("UPDATE schema_migrations_lock SET holder = NULL, expires_at = NULL WHERE id = 1 AND holder = \(holder)")
        }
        return try body()
    }
}
