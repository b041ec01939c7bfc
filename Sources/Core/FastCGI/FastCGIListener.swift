import CFCGI
import Glibc
import Synchronization

/// The listening socket of one worker process (a Unix socket path, or `host:port`).
///
/// Either created here with `FCGX_OpenSocket`, or inherited from systemd (socket
/// activation). A created socket: `stopAccepting()` shuts it down so threads blocked in
/// `accept()` wake (Linux returns EINVAL) and new connections are refused at once, which
/// makes nginx pass them to another worker; `close()` then closes it and removes the socket
/// path, unless another process has bound a new socket there meanwhile. An inherited socket
/// belongs to systemd and outlives this process (connections that arrive while the worker
/// restarts wait in its backlog for the next instance): it is never shut down nor unlinked;
/// stopping wakes the blocked threads by connecting to it, after libfcgi's shutdown flag is
/// set, so each woken `accept()` returns, reads end-of-file and sees the flag.
final class FastCGIListener: Sendable {
    let path: String
    /// The listening descriptor, handed to `FCGX_InitRequest` by each worker thread.
    let descriptor: Int32
    /// Whether the socket came from systemd (`SocketActivation`).
    let isInherited: Bool
    private let isUnixSocket: Bool
    /// Device and inode of the socket file we created, to recognise it at `close()`.
    private let identity: (device: UInt64, inode: UInt64)?
    /// Where stopping connects to wake threads blocked in `accept()` (inherited sockets).
    private let localAddress: SocketAddress?
    private let closed = Atomic<Bool>(false)

    /// libfcgi's rule: `host:port` with a non-zero port is TCP, anything else a path.
    static func isUnixSocketPath(_ path: String) -> Bool {
        path.firstIndex(of: ":").map { (Int(path[path.index(after: $0)...]) ?? 0) == 0 } ?? true
    }

    /// Takes the socket systemd passed; `path` (the worker's `--socket`) must name it, so
    /// a unit whose `ListenStream=` and `ExecStart=` disagree fails loudly at start.
    init(inherited activation: SocketActivation, path: String) throws(FastCGIError) {
        try FastCGILibrary.initialize()
        let address = try SocketAddress(localOf: activation.descriptor)
        guard address.matches(socketArgument: path) else {
            throw FastCGIError.socket("socket activation: systemd passed a socket on \(address), but --socket is \(path)", errno: 0)
        }
        self.path = path
        descriptor = activation.descriptor
        isInherited = true
        isUnixSocket = Self.isUnixSocketPath(path)
        identity = nil
        localAddress = address
    }

    /// Opens the socket. For a Unix path: refuses to start when a live process already
    /// listens there (libfcgi would silently unlink and steal the path), removes a stale
    /// socket file, then sets the file's mode to `mode` (default 0660: the nginx workers
    /// must share the owner or group).
    init(path: String, backlog: Int = 1024, mode: UInt32 = 0o660) throws(FastCGIError) {
        try FastCGILibrary.initialize()
        self.path = path
        isInherited = false
        localAddress = nil
        isUnixSocket = Self.isUnixSocketPath(path)
        if isUnixSocket {
            guard !path.isEmpty, path.utf8.count < MemoryLayout.size(ofValue: sockaddr_un().sun_path) else {
                throw FastCGIError.socket("socket path is empty or longer than sun_path allows: \(path)", errno: 0)
            }
            if FastCGIListener.someoneListens(at: path) { throw FastCGIError.socketInUse(path) }
        }
        let fd = FCGX_OpenSocket(path, Int32(clamping: backlog))
        guard fd >= 0 else { throw FastCGIError.socket("cannot listen on \(path)", errno: errno) }
        descriptor = fd
        if isUnixSocket {
            guard chmod(path, mode_t(mode)) == 0 else {
                let saved = errno
                Glibc.close(fd)
                throw FastCGIError.socket("cannot chmod \(path)", errno: saved)
            }
            var info = stat()
            identity = lstat(path, &info) == 0 ? (UInt64(info.st_dev), UInt64(info.st_ino)) : nil
        } else {
            identity = nil
        }
    }

    /// Wakes the `threads` threads that may be blocked in `accept()`, so they see libfcgi's
    /// shutdown flag (set before this call); a created socket also refuses new connections
    /// from now on. Idempotent.
    func stopAccepting(threads: Int) {
        guard let localAddress else {
            _ = shutdown(descriptor, Int32(SHUT_RDWR))
            return
        }
        for _ in 0..<max(threads, 1) { localAddress.poke() }
    }

    /// Closes the descriptor and removes the socket path if we created it and it is still
    /// ours. Idempotent.
    func close() {
        guard !closed.exchange(true, ordering: .acquiringAndReleasing) else { return }
        Glibc.close(descriptor)
        guard isUnixSocket, !isInherited, let identity else { return }
        var info = stat()
        if lstat(path, &info) == 0, UInt64(info.st_dev) == identity.device, UInt64(info.st_ino) == identity.inode {
            unlink(path)
        }
    }

    deinit { close() }

    /// True when connecting to `path` succeeds, i.e. a live process accepts there.
    static func someoneListens(at path: String) -> Bool {
        let probe = socket(AF_UNIX, Int32(SOCK_STREAM.rawValue), 0)
        guard probe >= 0 else { return false }
        defer { Glibc.close(probe) }
        var address = sockaddr_un()
        address.sun_family = sa_family_t(AF_UNIX)
        withUnsafeMutableBytes(of: &address.sun_path) { raw in
            raw.copyBytes(from: path.utf8.prefix(raw.count - 1))
        }
        let status = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                connect(probe, $0, socklen_t(MemoryLayout<sockaddr_un>.size))
            }
        }
        return status == 0
    }
}
