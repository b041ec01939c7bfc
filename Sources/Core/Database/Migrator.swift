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
/// Two processes migrating at once serialize on the named lock `billing_migrations`.
/// MariaDB commits DDL implicitly, so a file is not atomic: a file that fails halfway is not
/// recorded and must be repaired by hand (write DDL that fails early, one concern per file).
/// Files are sent whole as one multi-statement batch (`CLIENT_MULTI_STATEMENTS` for that
/// call only): no `DELIMITER` lines; routine bodies with `BEGIN ... END` work as is.
struct Migrator: Sendable {
    let directory: String
    /// Seconds to wait for another process's migration run to finish.
    var lockTimeoutSeconds: Int

    init(directory: String, lockTimeoutSeconds: Int = 30) {
        self.directory = directory
        self.lockTimeoutSeconds = lockTimeoutSeconds
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
                try db.execute("""
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
        } catch where error.errno == 1146 {
            applied = [:]
        }
        var result: [MigrationStatus] = []
        for file in files {
            let state: MigrationStatus.State
            if let row = applied[file.version] {
                state = row.checksum == file.checksum ? .applied(at: row.appliedAt)
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
        try db.execute("""
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
            applied[try row.int("version")] = AppliedRow(name: try row.string("name"), checksum: try row.string("checksum"),
                                                         appliedAt: try row.timestamp("applied_at"))
        }
        return applied
    }

    private func verify(files: [MigrationFile], applied: [Int: AppliedRow]) throws(DatabaseError) {
        for file in files {
            if let row = applied[file.version], row.checksum != file.checksum {
                throw DatabaseError.migration("\(file.fileName) was changed after it was applied (checksum \(row.checksum.prefix(12))… in schema_migrations, \(file.checksum.prefix(12))… on disk); migrations are forward-only, add a new file instead")
            }
        }
        let known = Set(files.map(\.version))
        if let unknown = applied.keys.filter({ !known.contains($0) }).min() {
            throw DatabaseError.migration("the database has migration \(unknown) (\(applied[unknown]!.name)) which \(directory) does not contain; is this an older checkout?")
        }
    }

    private func withMigrationLock<R>(_ db: DatabaseConnection, _ body: () throws(DatabaseError) -> R) throws(DatabaseError) -> R {
        let row = try db.queryOne("SELECT GET_LOCK('billing_migrations', \(lockTimeoutSeconds)) AS locked")
        guard let row, try row.optionalInt64("locked") == 1 else {
            throw DatabaseError.migration("another process holds the migration lock (waited \(lockTimeoutSeconds) s)")
        }
        defer { _ = try? db.query("SELECT RELEASE_LOCK('billing_migrations')") }
        return try body()
    }
}
