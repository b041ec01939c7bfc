import COpenSSL
import Glibc

/// One `sql/NNN_name.sql` file: its number, name, text and SHA-256.
struct MigrationFile: Sendable {
    let version: Int
    let name: String
    let fileName: String
    let sql: String
    let checksum: String

    /// Every `*.sql` file in `directory`, sorted by version. A `.sql` file whose name is not
    /// `NNN_name.sql`, two files with one number, or a gap in 1, 2, 3, ... is an error: a
    /// migration silently skipped would leave the schema different from the repository's.
    static func load(directory: String) throws(DatabaseError) -> [MigrationFile] {
        var files: [MigrationFile] = []
        for fileName in try listDirectory(directory).sorted() where fileName.hasSuffix(".sql") {
            guard let (version, name) = parse(fileName: fileName) else {
                throw DatabaseError.migration("\(fileName): name must be NNN_name.sql")
            }
            let bytes = try readFile(directory + "/" + fileName)
            guard let sql = String(validating: bytes, as: UTF8.self) else {
                throw DatabaseError.migration("\(fileName): not valid UTF-8")
            }
            files.append(MigrationFile(version: version, name: name, fileName: fileName, sql: sql,
                                       checksum: sha256Hex(bytes)))
        }
        files.sort { $0.version < $1.version }
        for (position, file) in files.enumerated() {
            if position > 0 && files[position - 1].version == file.version {
                throw DatabaseError.migration("\(files[position - 1].fileName) and \(file.fileName) have the same number")
            }
            if file.version != position + 1 {
                throw DatabaseError.migration("\(file.fileName): expected migration number \(position + 1) (numbers must run 1, 2, 3, ... without gaps)")
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
              name.allSatisfy({ $0.isASCII && ($0.isLowercase || $0.isNumber || $0 == "_") }) else { return nil }
        return (version, String(name))
    }

    private static func listDirectory(_ path: String) throws(DatabaseError) -> [String] {
        guard let dir = opendir(path) else {
            throw DatabaseError.migration("cannot open migrations directory \(path): \(String(cString: strerror(errno)))")
        }
        defer { closedir(dir) }
        var names: [String] = []
        while let entry = readdir(dir) {
            let name = withUnsafeBytes(of: entry.pointee.d_name) { raw in
                String(decoding: raw.prefix(while: { $0 != 0 }), as: UTF8.self)
            }
            if name != "." && name != ".." { names.append(name) }
        }
        return names
    }

    private static func readFile(_ path: String) throws(DatabaseError) -> [UInt8] {
        guard let file = fopen(path, "rb") else {
            throw DatabaseError.migration("cannot read \(path): \(String(cString: strerror(errno)))")
        }
        defer { fclose(file) }
        var bytes: [UInt8] = []
        var chunk = [UInt8](repeating: 0, count: 65_536)
        while true {
            let read = chunk.withUnsafeMutableBytes { fread($0.baseAddress, 1, $0.count, file) }
            if read > 0 { bytes += chunk[0..<read] }
            if read < chunk.count {
                if ferror(file) != 0 { throw DatabaseError.migration("cannot read \(path)") }
                return bytes
            }
        }
    }
}

/// Lowercase hex SHA-256 by OpenSSL's one-shot EVP_Digest.
/// (A shared helper is being written in Core/Crypto; dedupe when both land.)
func sha256Hex(_ bytes: [UInt8]) -> String {
    var digest = [UInt8](repeating: 0, count: Int(EVP_MAX_MD_SIZE))
    var length: UInt32 = 0
    let ok = bytes.withUnsafeBytes { input in
        EVP_Digest(input.baseAddress, input.count, &digest, &length, EVP_sha256(), nil)
    }
    precondition(ok == 1 && length == 32, "EVP_Digest(SHA-256) failed")
    let hex: [UInt8] = Array("0123456789abcdef".utf8)
    var text: [UInt8] = []
    text.reserveCapacity(64)
    for byte in digest.prefix(32) {
        text.append(hex[Int(byte >> 4)])
        text.append(hex[Int(byte & 0x0F)])
    }
    return String(decoding: text, as: UTF8.self)
}
