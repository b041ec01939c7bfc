/// Everything both daemons are configured with: one JSON file, environment overrides and
/// secrets read from files (see `BillingConfiguration+Loading.swift`). Validated once at
/// start-up; a daemon with an invalid configuration refuses to start and says why.
///
/// Secrets (`database.password`, `revenuecat.webhookSecret`) are never logged: the type's
/// `description` redacts them.
public struct BillingConfiguration: Sendable, CustomStringConvertible {
    public var database = DatabaseConfiguration()
    public var server = Server()
    public var admin = Admin()
    public var log = Log()
    public var auth = Auth()
    public var revenuecat = RevenueCat()
    public var apple = Apple()
    /// App Store product id → tier and cadence.
    public var products: [String: Product] = [:]
    public var binding = Binding()
    public var users = Users()
    public var reporting = Reporting()

    public init() {}

    /// The FastCGI workers (`server.*`).
    public struct Server: Sendable, Equatable {
        /// Threads per worker process, each with its own DB connection.
        public var threadsPerWorker = 4
        /// Request bodies above this answer 413 (nginx's `client_max_body_size` is set a bit higher).
        public var maxBodyBytes = 1 << 20
        /// Mode of each worker's Unix socket (nginx must be able to connect).
        public var socketMode = 0o660
        /// listen(2) backlog of each worker socket.
        public var backlog = 128
        /// Where workers publish their metrics snapshots (`<worker>.json`) and where the
        /// metrics route and `system.health` read them. nil: `metrics/` beside the worker
        /// socket (billing-rpc: beside `admin.socket`).
        public var metricsDirectory: String? = nil
        /// Users whose access records each worker process caches (two generations of this
        /// many; validated against `billing_access.snapshot_version` on every request). 0
        /// disables the cache.
        public var snapshotCacheUsers = 10_000
        public init() {}
    }

    /// The JSON-RPC admin daemon (`admin.*`).
    public struct Admin: Sendable, Equatable {
        /// Defaults to `$BILLING_VAR_DIR/run/billing-rpc.sock` in generated configs.
        public var socket = "var/run/billing-rpc.sock"
        public var maxMessageBytes = 4 << 20
        public var maxBatchLength = 100
        public var maxConnections = 32
        public var idleTimeoutSeconds = 300
        public init() {}
    }

    /// Logging (`log.*`): JSON lines to a file or standard error.
    public struct Log: Sendable, Equatable {
        public var file: String? = nil
        public var level: LogLevel = .info
        public init() {}
    }

    /// App ID-token verification (`auth.*`).
    public struct Auth: Sendable, Equatable {
        /// JWKS or `{kid: PEM certificate}` file.
        public var keysFile: String? = nil
        public var issuer: String? = nil
        public var audience: String? = nil
        public var leewaySeconds = 60
        public init() {}
    }

    /// RevenueCat webhooks (`revenuecat.*`).
    public struct RevenueCat: Sendable, Equatable {
        /// The exact Authorization header value RevenueCat sends; nil or empty → 501.
        public var webhookSecret: String? = nil
        /// During rotation, a second accepted value.
        public var previousWebhookSecret: String? = nil
        /// Lowercased entitlement-id substring → tier, checked in order (pro before plus).
        public var entitlementTiers: [(match: String, tier: Tier)] = [("pro", .pro), ("plus", .plus)]
        public init() {}

        public static func == (lhs: RevenueCat, rhs: RevenueCat) -> Bool {
            lhs.webhookSecret == rhs.webhookSecret && lhs.previousWebhookSecret == rhs.previousWebhookSecret
                && lhs.entitlementTiers.map(\.match) == rhs.entitlementTiers.map(\.match)
                && lhs.entitlementTiers.map(\.tier) == rhs.entitlementTiers.map(\.tier)
        }
    }

    /// App Store direct (`apple.*`).
    public struct Apple: Sendable, Equatable {
        public var trustedRootsFiles: [String] = []
        public var bundleId: String? = nil
        public var appAppleId: Int64? = nil
        public var environments: [String] = ["Production", "Sandbox"]
        public init() {}
    }

    public struct Product: Sendable, Equatable {
        public var tier: Tier
        public var cadence: Cadence
        public init(tier: Tier, cadence: Cadence) {
            self.tier = tier
            self.cadence = cadence
        }
    }

    /// Who may own an App Store subscription (`binding.policy`).
    public struct Binding: Sendable, Equatable {
        public enum Policy: String, Sendable, CaseIterable { case deny, restoreMoves = "restore_moves" }
        public var policy: Policy = .deny
        public init() {}
    }

    /// Which provider-side ids can name a user (`users.idPattern`, default: a UUID).
    public struct Users: Sendable, Equatable {
        public static let uuidPattern = "^[0-9A-Fa-f]{8}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{12}$"
        public var idPattern = Users.uuidPattern
        public init() {}
    }

    public struct Reporting: Sendable, Equatable {
        public var currency = "EUR"
        public init() {}
    }

    public var description: String {
        let db = database.socket.map { "socket \($0)" } ?? "\(database.host):\(database.port)"
        let secret = (revenuecat.webhookSecret?.isEmpty ?? true) ? "unset" : "set"
        return "BillingConfiguration(database: \(database.user)@\(db)/\(database.name), "
            + "threads: \(server.threadsPerWorker), admin: \(admin.socket), revenuecat secret: \(secret), "
            + "products: \(products.count))"
    }
}

/// A paid tier. `free` is the absence of one.
public enum Tier: String, Sendable, Comparable, CaseIterable {
    case free, plus, pro

    private var rank: Int {
        switch self {
        case .free: return 0
        case .plus: return 1
        case .pro: return 2
        }
    }

    public static func < (lhs: Tier, rhs: Tier) -> Bool { lhs.rank < rhs.rank }
}

/// How often a product renews; `monthlyFactor` normalizes its price to a month for MRR.
public enum Cadence: String, Sendable, CaseIterable {
    case weekly, monthly, twoMonths = "two_months", quarterly, semiannual, yearly, lifetime, consumable
}
