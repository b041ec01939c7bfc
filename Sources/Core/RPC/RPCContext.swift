/// What a handler can reach besides its params: the clock, who is calling, facts about
/// the daemon, hooks the executable installs, and typed services added by later features.
///
/// The socket server builds one context per connection (on that connection's thread) with
/// the factory the executable passes in, so a per-thread resource such as a database
/// connection can live here without locking. Tests build one directly with a `FixedClock`.
///
/// Two ways to extend it:
/// - a field here, for what every deployment has (the clock, the health probe);
/// - a service key, for what a feature adds in its own file without touching this one:
///   ```swift
///   enum GrantStoreKey: RPCServiceKey { static var defaultValue: GrantStore? { nil } }
///   extension RPCContext {
///       var grants: GrantStore? {
///           get { services[GrantStoreKey.self] }
///           set { services[GrantStoreKey.self] = newValue }
///       }
///   }
///   ```
public struct RPCContext {
    public var clock: any BillingClock
    /// The process on the other end of the socket (SO_PEERCRED), nil in tests.
    public var peer: RPCPeer?
    public var server: RPCServerInfo
    /// Reports the database for `system.health`; must not throw and should be quick. The
    /// default says the daemon was started without a database.
    public var databaseStatus: () -> JSON
    public var services: RPCServices
    /// Process-wide configuration, logger and what was built from them.
    public var billing: BillingServices
    /// This connection's own MariaDB connection (nil when the daemon runs without one).
    public var database: DatabaseConnection?
    /// The registry serving the current call, set by `JSONRPCServerProtocol` (for
    /// introspection such as `system.listMethods`).
    public internal(set) var registry = RPCMethodRegistry()

    public init(
        clock: any BillingClock = SystemClock(),
        peer: RPCPeer? = nil,
        server: RPCServerInfo = RPCServerInfo(),
        databaseStatus: (() -> JSON)? = nil,
        services: RPCServices = RPCServices(),
        billing: BillingServices = .unconfigured(),
        database: DatabaseConnection? = nil
    ) {
        self.clock = clock
        self.peer = peer
        self.server = server
        self.databaseStatus = databaseStatus ?? RPCContext.probe(database)
        self.services = services
        self.billing = billing
        self.database = database
    }
}

extension RPCContext {
    /// `{status: ok|down}` from a ping of `database`, or "not configured" without one.
    static func probe(_ database: DatabaseConnection?) -> () -> JSON {
        guard let database else { return { ["status": "not configured"] } }
        return {
            let started = monotonicMilliseconds()
            do {
                try database.ping()
                return ["status": "ok", "latencyMs": .int(monotonicMilliseconds() - started)]
            } catch {
                return ["status": "down"]
            }
        }
    }
}

/// Credentials of the connected process as the kernel reports them.
public struct RPCPeer: Sendable, Equatable {
    public var pid: Int32
    public var uid: UInt32
    public var gid: UInt32

    public init(pid: Int32, uid: UInt32, gid: UInt32) {
        self.pid = pid
        self.uid = uid
        self.gid = gid
    }
}

/// Facts about the running daemon, fixed at start-up.
public struct RPCServerInfo: Sendable {
    public var version: String
    public var startedAt: Timestamp
    /// `monotonicMilliseconds()` at start, so uptime survives wall-clock jumps.
    public var startedAtMonotonicMilliseconds: Int64

    public init(version: String = "dev", startedAt: Timestamp = SystemClock().now(),
                startedAtMonotonicMilliseconds: Int64 = monotonicMilliseconds()) {
        self.version = version
        self.startedAt = startedAt
        self.startedAtMonotonicMilliseconds = startedAtMonotonicMilliseconds
    }
}

/// A key for a value stored in `RPCServices`; `defaultValue` is what reads return until
/// the executable sets one.
public protocol RPCServiceKey {
    associatedtype Value
    static var defaultValue: Value { get }
}

/// Type-keyed storage for services added by features (see `RPCContext`).
public struct RPCServices {
    private var storage: [ObjectIdentifier: Any] = [:]

    public init() {}

    public subscript<Key: RPCServiceKey>(key: Key.Type) -> Key.Value {
        get { storage[ObjectIdentifier(key)].flatMap { $0 as? Key.Value } ?? Key.defaultValue }
        set { storage[ObjectIdentifier(key)] = newValue }
    }
}
