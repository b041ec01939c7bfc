import Glibc

/// systemd socket activation (`sd_listen_fds(3)`), written against the protocol: when
/// `LISTEN_PID` is this process and `LISTEN_FDS` is 1, descriptor 3 is a listening socket
/// systemd opened for us (`billing-fcgi@.socket`: its owner, group and mode are the unit's,
/// so nginx's group reaches the worker socket and nothing else). The variables are removed
/// once read, so no child inherits them.
struct SocketActivation: Sendable, Equatable {
    /// `SD_LISTEN_FDS_START`.
    static let firstDescriptor: Int32 = 3

    let descriptor: Int32

    /// nil when this process was not socket-activated (no `LISTEN_PID`, or another
    /// process's). Throws when it was, but not with exactly one listening stream socket.
    init?(environment: [String: String], processID: Int32 = getpid()) throws(FastCGIError) {
        guard let pid = environment["LISTEN_PID"], Int32(pid) == processID else { return nil }
        defer {
            unsetenv("LISTEN_PID")
            unsetenv("LISTEN_FDS")
            unsetenv("LISTEN_FDNAMES")
        }
        guard let count = environment["LISTEN_FDS"].flatMap({ Int($0) }), count >= 1 else {
            throw FastCGIError.socket("socket activation: LISTEN_FDS is missing or not a positive count", errno: 0)
        }
        guard count == 1 else {
            throw FastCGIError.socket(
                "socket activation: \(count) sockets passed; a worker serves exactly one (one ListenStream= per billing-fcgi@.socket)", errno: 0)
        }
        let fd = Self.firstDescriptor
        var info = stat()
        guard fstat(fd, &info) == 0 else {
            throw FastCGIError.socket("socket activation: descriptor \(fd) is not open", errno: errno)
        }
        guard info.st_mode & S_IFMT == S_IFSOCK else {
            throw FastCGIError.socket("socket activation: descriptor \(fd) is not a socket", errno: 0)
        }
        var listening: Int32 = 0
        var length = socklen_t(MemoryLayout<Int32>.size)
        guard getsockopt(fd, SOL_SOCKET, SO_ACCEPTCONN, &listening, &length) == 0, listening == 1 else {
            throw FastCGIError.socket("socket activation: descriptor \(fd) is not a listening stream socket (Accept=no, ListenStream=)", errno: 0)
        }
        _ = fcntl(fd, F_SETFD, FD_CLOEXEC)
        descriptor = fd
    }
}

/// The local address of a socket, as `getsockname(2)` gives it: what an inherited listener
/// is checked against (`--socket` must name it) and where stopping connects to wake the
/// threads blocked in `accept()`.
struct SocketAddress: Sendable, Equatable, CustomStringConvertible {
    enum Kind: Sendable, Equatable {
        case unix(path: String)
        case inet(port: UInt16)
        case other(family: Int32)
    }

    let kind: Kind
    private let storage: [UInt8]

    init(localOf fd: Int32) throws(FastCGIError) {
        var address = sockaddr_storage()
        var length = socklen_t(MemoryLayout<sockaddr_storage>.size)
        let status = withUnsafeMutablePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(fd, $0, &length) }
        }
        guard status == 0 else { throw FastCGIError.socket("getsockname failed", errno: errno) }
        storage = withUnsafeBytes(of: &address) { Array($0.prefix(Int(length))) }
        switch Int32(address.ss_family) {
        case AF_UNIX:
            let path = withUnsafeBytes(of: &address) { raw -> String in
                let bytes = raw[MemoryLayout<sa_family_t>.size..<Int(length)]
                return String(decoding: bytes.prefix { $0 != 0 }, as: UTF8.self)
            }
            kind = .unix(path: path)
        case AF_INET:
            let port = withUnsafePointer(to: &address) {
                $0.withMemoryRebound(to: sockaddr_in.self, capacity: 1) { UInt16(bigEndian: $0.pointee.sin_port) }
            }
            kind = .inet(port: port)
        case let family:
            kind = .other(family: family)
        }
    }

    /// Whether `--socket` (a path, or libfcgi's `host:port`) names this address.
    func matches(socketArgument argument: String) -> Bool {
        switch kind {
        case .unix(let path):
            return path == argument
        case .inet(let port):
            guard let colon = argument.lastIndex(of: ":") else { return false }
            return UInt16(argument[argument.index(after: colon)...]) == port
        case .other:
            return false
        }
    }

    /// Opens a connection to this address and closes it at once, without blocking (a full
    /// backlog just fails). A wildcard TCP address is reached on 127.0.0.1.
    func poke() {
        let family: Int32
        switch kind {
        case .unix: family = AF_UNIX
        case .inet: family = AF_INET
        case .other: return
        }
        let fd = socket(family, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_NONBLOCK.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
        guard fd >= 0 else { return }
        defer { close(fd) }
        var bytes = storage
        if case .inet = kind {
            bytes.withUnsafeMutableBytes { raw in
                raw.baseAddress!.withMemoryRebound(to: sockaddr_in.self, capacity: 1) { address in
                    if address.pointee.sin_addr.s_addr == 0 { address.pointee.sin_addr.s_addr = UInt32(0x7f00_0001).bigEndian }
                }
            }
        }
        _ = bytes.withUnsafeBytes { raw in
            connect(fd, raw.baseAddress!.assumingMemoryBound(to: sockaddr.self), socklen_t(raw.count))
        }
    }

    var description: String {
        switch kind {
        case .unix(let path): return path
        case .inet(let port): return "TCP port \(port)"
        case .other(let family): return "an address of family \(family)"
        }
    }
}
