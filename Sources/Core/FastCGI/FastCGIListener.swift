import CFCGI
import Glibc
import Synchronization

/// The listening socket of one worker process (a Unix socket path, or `host:port`).
///
/// Owns the file descriptor from `FCGX_OpenSocket`. `stopAccepting()` shuts it down so
/// threads blocked in `accept()` wake (Linux returns EINVAL) and new connections are refused
/// at once, which makes nginx pass them to another worker; `close()` then closes it and
/// removes the socket path, unless another process has bound a new socket there meanwhile.
final class FastCGIListener: Sendable {
    let path: String
    /// The listening descriptor, handed to `FCGX_InitRequest` by each worker thread.
    let descriptor: Int32
    private let isUnixSocket: Bool
    /// Device and inode of the socket file we created, to recognise it at `close()`.
    private let identity: (device: UInt64, inode: UInt64)?
    private let closed = Atomic<Bool>(false)

    /// Opens the socket. For a Unix path: refuses to start when a live process already
    /// listens there (libfcgi would silently unlink and steal the path), removes a stale
    /// socket file, then sets the file's mode to `mode` (default 0660: the nginx workers
    /// must share the owner or group).
    init(path: String, backlog: Int = 1024, mode: UInt32 = 0o660) throws(FastCGIError) {
        try FastCGILibrary.initialize()
        self.path = path
        // libfcgi's rule: `host:port` with a non-zero port is TCP, anything else a path.
        isUnixSocket = path.firstIndex(of: ":").map { (Int(path[path.index(after: $0)...]) ?? 0) == 0 } ?? true
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

    /// Refuses new connections and wakes threads blocked in `accept()`. Idempotent.
    func stopAccepting() {
        _ = shutdown(descriptor, Int32(SHUT_RDWR))
    }

    /// Closes the descriptor and removes the socket path if it is still ours. Idempotent.
    func close() {
        guard !closed.exchange(true, ordering: .acquiringAndReleasing) else { return }
        Glibc.close(descriptor)
        guard isUnixSocket, let identity else { return }
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
