/// What the JSON-RPC layer needs of a call's context: the clock, who is calling, the
/// connection's database and the registry (for introspection such as
/// `system.listMethods`). The application's context (`App/AdminRPCContext`, one per
/// connection, built on that connection's thread) conforms to it; what the methods need of
/// the process they are registered with.
protocol RPCContextProtocol: SendableMetatype {
    var clock: any BillingClock { get }
    /// The process on the other end of the socket (SO_PEERCRED), nil in tests.
    var peer: RPCPeer? { get }
    /// This connection's own MariaDB connection (nil when the daemon runs without one).
    var database: DatabaseConnection? { get }
    /// The registry serving the current call, set by `JSONRPCServerProtocol`.
    var registry: RPCMethodRegistry<Self> { get set }
}

/// Credentials of the connected process as the kernel reports them.
struct RPCPeer: Sendable, Equatable {
    var pid: Int32
    var uid: UInt32
    var gid: UInt32

    init(pid: Int32, uid: UInt32, gid: UInt32) {
        self.pid = pid
        self.uid = uid
        self.gid = gid
    }
}

/// Facts about the running daemon, fixed at start-up.
struct RPCServerInfo: Sendable {
    var version: String
    var startedAt: Timestamp
    /// `monotonicMilliseconds()` at start, so uptime survives wall-clock jumps.
    var startedAtMonotonicMilliseconds: Int64

    init(
        version: String = "dev", startedAt: Timestamp = SystemClock().now(),
        startedAtMonotonicMilliseconds: Int64 = monotonicMilliseconds()
    ) {
        self.version = version
        self.startedAt = startedAt
        self.startedAtMonotonicMilliseconds = startedAtMonotonicMilliseconds
    }
}
