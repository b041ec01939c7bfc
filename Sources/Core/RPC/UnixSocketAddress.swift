import Glibc

/// A `sockaddr_un` for a filesystem path, and the checks done on that path before binding.
struct UnixSocketAddress {
    private var address = sockaddr_un()

    init(path: String) throws(RPCServerError) {
        let bytes = Array(path.utf8)
        let capacity = MemoryLayout.size(ofValue: address.sun_path)
        guard !bytes.isEmpty, bytes.count < capacity, !bytes.contains(0) else {
            throw RPCServerError("socket path must be 1 to \(capacity - 1) bytes: \(path)")
        }
        address.sun_family = sa_family_t(AF_UNIX)
        withUnsafeMutableBytes(of: &address.sun_path) { $0.copyBytes(from: bytes) }
    }

    mutating func withSockaddr<R>(_ body: (UnsafePointer<sockaddr>, socklen_t) -> R) -> R {
        withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { body($0, socklen_t(MemoryLayout<sockaddr_un>.size)) }
        }
    }

    /// Removes a socket file nobody listens on; refuses when a server answers on it or
    /// when the path is not a socket (never delete an operator's regular file).
    static func removeStaleSocket(at path: String) throws(RPCServerError) {
        var info = stat()
        guard lstat(path, &info) == 0 else {
            if errno == ENOENT { return }
            throw .system("cannot inspect \(path)", errno: errno)
        }
        guard info.st_mode & S_IFMT == S_IFSOCK else {
            throw RPCServerError("\(path) exists and is not a socket; refusing to replace it")
        }
        var address = try UnixSocketAddress(path: path)
        let probe = socket(AF_UNIX, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
        guard probe >= 0 else { throw .system("cannot create a Unix socket", errno: errno) }
        defer { close(probe) }
        var timeout = timeval(seconds: 1)
        setsockopt(probe, SOL_SOCKET, SO_SNDTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
        if address.withSockaddr({ connect(probe, $0, $1) }) == 0 {
            throw RPCServerError("another server is already listening on \(path)")
        }
        switch errno {
        case ECONNREFUSED, ENOENT:
            guard unlink(path) == 0 || errno == ENOENT else { throw .system("cannot remove stale socket \(path)", errno: errno) }
        case EAGAIN, EINPROGRESS:
            throw RPCServerError("another server is already listening on \(path) (its backlog is full)")
        case let code:
            throw .system("cannot tell whether a server listens on \(path)", errno: code)
        }
    }

    /// The connected process's pid, uid and gid as the kernel saw them at connect time.
    static func peerCredentials(of fd: Int32) -> RPCPeer? {
        // `struct ucred` is hidden behind _GNU_SOURCE; it is {pid_t, uid_t, gid_t}, three
        // 32-bit fields on Linux, which a homogeneous tuple lays out identically.
        var credentials: (UInt32, UInt32, UInt32) = (0, 0, 0)
        var length = socklen_t(MemoryLayout.size(ofValue: credentials))
        guard getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &credentials, &length) == 0,
            length == socklen_t(MemoryLayout.size(ofValue: credentials))
        else { return nil }
        return RPCPeer(pid: Int32(bitPattern: credentials.0), uid: credentials.1, gid: credentials.2)
    }
}
