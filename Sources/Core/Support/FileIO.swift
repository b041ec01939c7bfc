import Glibc

/// Reading small trusted files (configuration, keys, SQL) without Foundation.
enum FileIO {
    struct Error: Swift.Error, CustomStringConvertible {
        let path: String
        let errno: Int32
        var description: String { "cannot read \(path): \(String(cString: strerror(errno)))" }
    }

    /// The whole file, refusing anything over `maxBytes` (a config or key file is small).
    static func read(_ path: String, maxBytes: Int = 16 << 20) throws(FileIO.Error) -> [UInt8] {
        let fd = open(path, O_RDONLY | O_CLOEXEC)
        guard fd >= 0 else { throw Error(path: path, errno: Glibc.errno) }
        defer { close(fd) }
        var result: [UInt8] = []
        var chunk = [UInt8](repeating: 0, count: 65_536)
        while true {
            let n = chunk.withUnsafeMutableBytes { Glibc.read(fd, $0.baseAddress, $0.count) }
            if n < 0 {
                if Glibc.errno == EINTR { continue }
                throw Error(path: path, errno: Glibc.errno)
            }
            if n == 0 { break }
            result.append(contentsOf: chunk[0..<n])
            if result.count > maxBytes { throw Error(path: path, errno: EFBIG) }
        }
        return result
    }

    static func readString(_ path: String) throws(FileIO.Error) -> String {
        String(decoding: try read(path), as: UTF8.self)
    }

    static func exists(_ path: String) -> Bool { access(path, F_OK) == 0 }

    /// Sorted names of the entries of a directory (no "." or "..").
    static func list(_ directory: String) throws(FileIO.Error) -> [String] {
        guard let dir = opendir(directory) else { throw Error(path: directory, errno: Glibc.errno) }
        defer { closedir(dir) }
        var names: [String] = []
        while let entry = readdir(dir) {
            let name = withUnsafeBytes(of: entry.pointee.d_name) { raw in
                String(decoding: raw.prefix(while: { $0 != 0 }), as: UTF8.self)
            }
            if name != "." && name != ".." { names.append(name) }
        }
        return names.sorted()
    }
}
