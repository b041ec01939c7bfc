/// One `sql/NNN_name.sql` file: its number, name, text and SHA-256.
struct MigrationFile: Sendable {
    let version: Int
    let name: String
    let fileName: String
    let sql: String
    let checksum: String
    /// The checksums of this file's earlier texts, named by its `-- replaces sha256 <hex>`
    /// lines: a statement of an applied migration amended (a backfill's plan forced, say)
    /// without its effect changing. A database that applied an earlier text counts it as
    /// applied; nothing runs again.
    let replaces: Set<String>

    /// Whether `applied` (a `schema_migrations` checksum) is this file's text or one it replaces.
    func matches(_ applied: String) -> Bool { applied == checksum || replaces.contains(applied) }

    /// The `-- replaces sha256 <64 hex digits>` lines of `sql`.
    static func replacedChecksums(in sql: String) -> Set<String> {
        let prefix = "-- replaces sha256 "
        var found: Set<String> = []
        for line in sql.split(whereSeparator: \.isNewline) where line.hasPrefix(prefix) {
            var hex = line.dropFirst(prefix.count)
            while hex.last == " " { hex = hex.dropLast() }
            if hex.count == 64, hex.allSatisfy({ $0.isHexDigit && !$0.isUppercase }) { found.insert(String(hex)) }
        }
        return found
    }

    /// Every `*.sql` file in `directory`, sorted by version. A `.sql` file whose name is not
    /// `NNN_name.sql`, two files with one number, or a gap in 1, 2, 3, ... is an error: a
    /// migration silently skipped would leave the schema different from the repository's.
    static func load(directory: String) throws(DatabaseError) -> [MigrationFile] {
        var files: [MigrationFile] = []
        let names: [String]
        do { names = try FileIO.list(directory) } catch {
            throw DatabaseError.migration("cannot open migrations directory: \(error)")
        }
        for fileName in names where fileName.hasSuffix(".sql") {
            guard let (version, name) = parse(fileName: fileName) else {
                throw DatabaseError.migration("\(fileName): name must be NNN_name.sql")
            }
            let bytes: [UInt8]
            do { bytes = try FileIO.read(directory + "/" + fileName) } catch {
                throw DatabaseError.migration("\(error)")
            }
            guard let sql = String(validating: bytes, as: UTF8.self) else {
                throw DatabaseError.migration("\(fileName): not valid UTF-8")
            }
            files.append(
                MigrationFile(
                    version: version, name: name, fileName: fileName, sql: sql,
                    checksum: SHA256.hexHash(bytes), replaces: replacedChecksums(in: sql)))
        }
        files.sort { $0.version < $1.version }
        for (position, file) in files.enumerated() {
            if position > 0 && files[position - 1].version == file.version {
                throw DatabaseError.migration("\(files[position - 1].fileName) and \(file.fileName) have the same number")
            }
            if file.version != position + 1 {
                throw DatabaseError.migration(
                    "\(file.fileName): expected migration number \(position + 1) (numbers must run 1, 2, 3, ... without gaps)")
            }
        }
        return files
    }

    /// `012_add_grants.sql` → (12, "add_grants").
    static func parse(fileName: String) -> (Int, String)? {
        let stem = fileName.dropLast(4)
        guard let underscore = stem.firstIndex(of: "_") else { return nil }
        let digits = stem[..<underscore]
        let name = stem[stem.index(after: underscore)...]
        guard digits.count >= 3, digits.allSatisfy({ $0.isASCII && $0.isNumber }), let version = Int(digits),
            version > 0, !name.isEmpty,
            name.allSatisfy({ $0.isASCII && ($0.isLowercase || $0.isNumber || $0 == "_") })
        else { return nil }
        return (version, String(name))
    }
}
