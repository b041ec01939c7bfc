import Glibc
import Synchronization

/// The `billing-rpc` listener: newline-delimited JSON-RPC on a Unix stream socket.
///
/// One message per line, one reply line per message that needs one (a batch gets one line).
/// Each connection runs on its own thread, bounded by `maxConnections`; a connection past
/// the bound gets one error line and is closed. A connection that stays silent for
/// `idleTimeoutSeconds`, or takes longer than `readTimeoutSeconds` to finish a line it
/// started, is closed, so no client can hold a thread forever. Lines are never buffered
/// beyond the protocol's `maxMessageBytes`: a longer line gets an error and the connection
/// is closed.
///
/// `stop()` stops accepting, lets calls in flight finish, closes idle connections and
/// removes the socket file. It runs under the process skeleton (`ProcessLifecycle`).
final class RPCSocketServer<Context: RPCContextProtocol>: Sendable, ProcessLifecycle.Service {
    typealias Configuration = RPCSocketServerConfiguration

    let configuration: Configuration
    let rpc: JSONRPCServerProtocol<Context>
    let makeContext: @Sendable (RPCPeer?) -> Context
    let logger: Logger
    /// Told of every connection refused by `configuration.peerPolicy`, on a thread of its
    /// own, with a context for that peer (to audit it).
    let onRefusedPeer: @Sendable (Context, RPCPeer?) -> Void

    private let stopping = Atomic<Bool>(false)
    /// The accept thread plus every connection thread; `stop()` waits for zero.
    private let liveThreads = Atomic<Int>(0)
    private let openConnections = Atomic<Int>(0)
    private let listener = Mutex<Listener?>(nil)

    private struct Listener: Sendable {
        let fd: Int32
        /// Never read: one byte written at stop keeps it readable, waking every poll.
        let wakeRead: Int32
        let wakeWrite: Int32
        /// Identity of the socket file we created, so stop never unlinks a successor's.
        let device: UInt64
        let inode: UInt64
    }

    /// - Parameters:
    ///   - makeContext: builds the context for one connection, on that connection's thread
    ///     (open per-connection resources such as a database connection here).
    ///   - logger: receives connection-level events; calls are not logged here.
    init(
        configuration: Configuration, protocol rpc: JSONRPCServerProtocol<Context>,
        makeContext: @escaping @Sendable (RPCPeer?) -> Context, logger: Logger = .discarding,
        onRefusedPeer: @escaping @Sendable (Context, RPCPeer?) -> Void = { _, _ in }
    ) {
        self.configuration = configuration
        self.rpc = rpc
        self.makeContext = makeContext
        self.logger = logger
        self.onRefusedPeer = onRefusedPeer
    }

    /// Binds the socket and starts the accept thread. Fails when another live server
    /// answers on the path, when the path is something other than a socket, or on any
    /// system error. A stale socket file (nobody listening) is replaced.
    func start() throws(RPCServerError) {
        let path = configuration.socketPath
        var address = try UnixSocketAddress(path: path)
        try UnixSocketAddress.removeStaleSocket(at: path)

        let fd = socket(AF_UNIX, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
        guard fd >= 0 else { throw .system("cannot create a Unix socket", errno: errno) }
        var created = false
        defer { if !created { close(fd) } }
        guard address.withSockaddr({ bind(fd, $0, $1) }) == 0 else {
            throw .system("cannot bind \(path)", errno: errno)
        }
        var info = stat()
        guard chmod(path, configuration.socketMode) == 0, stat(path, &info) == 0 else {
            let code = errno
            unlink(path)
            throw .system("cannot set the mode of \(path)", errno: code)
        }
        guard listen(fd, 64) == 0 else {
            let code = errno
            unlink(path)
            throw .system("cannot listen on \(path)", errno: code)
        }
        var wake: [Int32] = [-1, -1]
        // pipe2/accept4 are _GNU_SOURCE-only and not imported; nothing here forks or execs
        // between the two calls, so setting FD_CLOEXEC afterwards is equivalent.
        guard pipe(&wake) == 0 else {
            let code = errno
            unlink(path)
            throw .system("cannot create the wake-up pipe", errno: code)
        }
        for end in wake { _ = fcntl(end, F_SETFD, FD_CLOEXEC) }
        let started = Listener(
            fd: fd, wakeRead: wake[0], wakeWrite: wake[1],
            device: UInt64(info.st_dev), inode: UInt64(info.st_ino))
        liveThreads.add(1, ordering: .sequentiallyConsistent)
        guard PosixThread.detach({ [self] in acceptLoop(started) }) else {
            liveThreads.subtract(1, ordering: .sequentiallyConsistent)
            unlink(path)
            close(wake[0])
            close(wake[1])
            throw RPCServerError("cannot start the accept thread")
        }
        created = true
        listener.withLock { $0 = started }
        logger.log(
            .info, "rpc.listening",
            fields: [
                "rpc.socket": .string(path),
                "rpc.maxConnections": .int(Int64(configuration.maxConnections)),
            ])
    }

    /// Stops accepting, waits up to `shutdownGraceSeconds` for calls in flight, closes idle
    /// connections and removes the socket file. Safe to call more than once.
    func stop() {
        guard !stopping.exchange(true, ordering: .sequentiallyConsistent),
            let started = listener.withLock({ $0 })
        else { return }
        var byte: UInt8 = 1
        _ = write(started.wakeWrite, &byte, 1)
        let deadline = monotonicMilliseconds() + Int64(configuration.shutdownGraceSeconds * 1000)
        while liveThreads.load(ordering: .sequentiallyConsistent) > 0 && monotonicMilliseconds() < deadline {
            usleep(5_000)
        }
        let remaining = liveThreads.load(ordering: .sequentiallyConsistent)
        var info = stat()
        if stat(configuration.socketPath, &info) == 0, UInt64(info.st_dev) == started.device,
            UInt64(info.st_ino) == started.inode
        {
            unlink(configuration.socketPath)
        }
        if remaining == 0 {
            close(started.wakeRead)
            close(started.wakeWrite)
        }
        logger.log(
            remaining == 0 ? .info : .warning, "rpc.stopped",
            fields: ["rpc.socket": .string(configuration.socketPath), "rpc.abandonedThreads": .int(Int64(remaining))])
    }

    /// Connections being served right now.
    var connectionCount: Int { openConnections.load(ordering: .relaxed) }

    // MARK: Accepting

    private func acceptLoop(_ started: Listener) {
        defer {
            close(started.fd)
            liveThreads.subtract(1, ordering: .sequentiallyConsistent)
        }
        while !stopping.load(ordering: .sequentiallyConsistent) {
            var fds = [
                pollfd(fd: started.fd, events: Int16(POLLIN), revents: 0),
                pollfd(fd: started.wakeRead, events: Int16(POLLIN), revents: 0),
            ]
            guard poll(&fds, 2, -1) >= 0 else {
                if errno == EINTR { continue }
                logger.log(.error, "rpc.accept.failed", fields: ["error": .string(systemErrorMessage(errno))])
                return
            }
            if fds[1].revents != 0 { return }
            guard fds[0].revents & Int16(POLLIN) != 0 else { continue }
            let client = accept(started.fd, nil, nil)
            guard client >= 0 else {
                let code = errno
                if code == EMFILE || code == ENFILE || code == ENOMEM || code == ENOBUFS {
                    logger.log(.error, "rpc.accept.failed", fields: ["error": .string(systemErrorMessage(code))])
                    usleep(100_000)
                }
                continue
            }
            _ = fcntl(client, F_SETFD, FD_CLOEXEC)
            admit(client, wakeFD: started.wakeRead)
        }
    }

    private func admit(_ client: Int32, wakeFD: Int32) {
        var timeout = timeval(seconds: configuration.writeTimeoutSeconds)
        setsockopt(client, SOL_SOCKET, SO_SNDTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
        let peer = UnixSocketAddress.peerCredentials(of: client)
        let count = openConnections.add(1, ordering: .sequentiallyConsistent).newValue
        guard count <= configuration.maxConnections else {
            openConnections.subtract(1, ordering: .sequentiallyConsistent)
            refuse(client, peer: peer, reason: "Server busy: too many connections (limit \(configuration.maxConnections))")
            return
        }
        liveThreads.add(1, ordering: .sequentiallyConsistent)
        let admitted = configuration.peerPolicy?.admits(peer) ?? true
        let started = PosixThread.detach { [self] in
            defer {
                if admitted { close(client) }
                openConnections.subtract(1, ordering: .sequentiallyConsistent)
                liveThreads.subtract(1, ordering: .sequentiallyConsistent)
            }
            guard admitted else {
                // Nothing the peer sent is read: one error line, closed, then audited.
                refuse(client, peer: peer, reason: Self.forbidden, code: RPCError.Code.forbidden)
                onRefusedPeer(makeContext(peer), peer)
                return
            }
            let connection = RPCSocketConnection(
                fd: client, wakeFD: wakeFD, rpc: rpc, context: makeContext(peer), peer: peer,
                configuration: configuration, isStopping: { [self] in stopping.load(ordering: .sequentiallyConsistent) },
                logger: logger)
            connection.run()
        }
        if !started {
            openConnections.subtract(1, ordering: .sequentiallyConsistent)
            liveThreads.subtract(1, ordering: .sequentiallyConsistent)
            if admitted {
                refuse(client, peer: peer, reason: "Server busy: cannot start a thread")
            } else {
                refuse(client, peer: peer, reason: Self.forbidden, code: RPCError.Code.forbidden)
            }
        }
    }

    private static var forbidden: String { "Forbidden: this user may not use the admin socket" }

    private func refuse(_ client: Int32, peer: RPCPeer?, reason: String, code: Int = RPCError.Code.serverBusy) {
        let reply = JSONRPCServerProtocol<Context>.errorResponse(RPCError(code: code, message: reason), id: .null)
        _ = RPCSocketConnection<Context>.writeAll(client, reply.serialized() + [UInt8(ascii: "\n")])
        close(client)
        var fields = RPCSocketConnection<Context>.peerFields(peer)
        fields["rpc.errorCode"] = .int(Int64(code))
        logger.log(.warning, "rpc.connection.refused", fields: fields)
    }
}

extension timeval {
    init(seconds: Double) {
        let whole = seconds.rounded(.down)
        self.init(tv_sec: Int(whole), tv_usec: Int((seconds - whole) * 1_000_000))
    }
}

/// Where and how the admin socket listens, and its connection bounds.
struct RPCSocketServerConfiguration: Sendable {
    var socketPath: String
    /// Applied before `listen`, so nobody can connect while it is still wider.
    var socketMode: mode_t = 0o660
    var maxConnections: Int = 32
    /// Closes a connection that sends nothing for this long between messages.
    var idleTimeoutSeconds: Double = 300
    /// Closes (after an error line) a connection that started a line and did not end it in time.
    var readTimeoutSeconds: Double = 10
    /// A client that does not read its replies for this long is dropped.
    var writeTimeoutSeconds: Double = 10
    /// How long `stop()` waits for calls in flight.
    var shutdownGraceSeconds: Double = 30
    /// Who may connect (`admin.allowedUsers`); nil admits every peer the socket file's mode lets in.
    var peerPolicy: RPCPeerPolicy?

    init(socketPath: String) { self.socketPath = socketPath }
}
