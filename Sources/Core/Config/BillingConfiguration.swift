/// Everything both daemons are configured with: one JSON file, environment overrides and
/// secrets read from files (see `BillingConfiguration+Loading.swift`). Validated once at
/// start-up; a daemon with an invalid configuration refuses to start and says why.
///
/// Secrets (`database.password`, `revenuecat.webhookSecret`, `revenuecat.apiKey`, `apple.serverApi.privateKey`)
/// are never logged: the type's `description` redacts them.
struct BillingConfiguration: Sendable, CustomStringConvertible {
    var database = DatabaseConfiguration()
    var server = Server()
    var admin = Admin()
    var log = Log()
    var auth = Auth()
    var revenuecat = RevenueCat()
    var apple = Apple()
    /// App Store product id → tier and cadence.
    var products: [String: Product] = [:]
    var binding = Binding()
    var users = Users()
    var reporting = Reporting()
    var reconcile = Reconcile()
    var webhooks = Webhooks()
    var live = Live()
    var outbox = Outbox()
    var entitlements = Entitlements()
    var google = Google()

    init() {}

    /// The FastCGI workers (`server.*`).
    struct Server: Sendable, Equatable {
        /// Threads per worker process, each with its own DB connection.
        var threadsPerWorker = 4
        /// Request bodies above this answer 413 (nginx's `client_max_body_size` is set a bit higher).
        var maxBodyBytes = 1 << 20
        /// Mode of each worker's Unix socket (nginx must be able to connect).
        var socketMode = 0o660
        /// listen(2) backlog of each worker socket.
        var backlog = 128
        /// IPv4 addresses of the nginx hosts allowed to connect to a worker listening on TCP
        /// (libfcgi's `FCGI_WEB_SERVER_ADDRS`; that variable is used when this is empty). A
        /// worker refuses to listen on TCP without any.
        var webServerAddrs: [String] = []
        /// Where workers publish their metrics snapshots (`<worker>.json`) and where the
        /// metrics route and `system.health` read them. nil: `metrics/` beside the worker
        /// socket (billing-rpc: beside `admin.socket`).
        var metricsDirectory: String? = nil
        /// Users whose access records each worker process caches (two generations of this
        /// many; validated against `billing_access.snapshot_version` on every request). 0
        /// disables the cache.
        var snapshotCacheUsers = 10_000
        init() {}
    }

    /// The JSON-RPC admin daemon (`admin.*`).
    struct Admin: Sendable, Equatable {
        /// Defaults to `$BILLING_VAR_DIR/run/billing-rpc.sock` in generated configs.
        var socket = "var/run/billing-rpc.sock"
        var maxMessageBytes = 4 << 20
        var maxBatchLength = 100
        var maxConnections = 32
        var idleTimeoutSeconds = 300
        /// Who may use the admin socket: user names or numeric uids, checked against each
        /// connection's peer (`SO_PEERCRED`) before anything is read. Empty: root and the
        /// daemon's own user.
        var allowedUsers: [String] = []
        init() {}
    }

    /// Logging (`log.*`): JSON lines to a file or standard error.
    struct Log: Sendable, Equatable {
        var file: String? = nil
        var level: LogLevel = .info
        init() {}
    }

    /// App ID-token verification (`auth.*`).
    struct Auth: Sendable, Equatable {
        /// JWKS or `{kid: PEM certificate}` file: the keys when `keysUrl` is not set, and
        /// the keys until the first fetch succeeds when it is (an offline start).
        var keysFile: String? = nil
        /// The issuer's published keys (HTTPS; a JWKS or a `{kid: PEM certificate}` map),
        /// kept as long as the answer's `Cache-Control: max-age` says (`TokenKeyStore`).
        var keysUrl: String? = nil
        /// A PEM bundle trusted for `keysUrl` instead of the system's (tests: a local server).
        var caFile: String? = nil
        var keysTimeoutSeconds = 5
        /// Freshness of an answer without `max-age`.
        var keysDefaultMaxAgeSeconds = 3600
        /// The fewest seconds between two fetches: a token naming an unknown `kid` fetches at
        /// most this often, and a failing issuer is retried from this interval up, doubling.
        var keysMinRefreshSeconds = 5
        /// Whether app tokens can be verified at all.
        var hasKeys: Bool { keysFile != nil || keysUrl != nil }
        var issuer: String? = nil
        var audience: String? = nil
        var leewaySeconds = 60
        init() {}
    }

    /// RevenueCat webhooks (`revenuecat.*`).
    struct RevenueCat: Sendable, Equatable {
        /// The exact Authorization header value RevenueCat sends; nil or empty → 501.
        var webhookSecret: String? = nil
        /// During rotation, a second accepted value.
        var previousWebhookSecret: String? = nil
        /// Lowercased entitlement-id substring → tier, checked in order (pro before plus).
        var entitlementTiers: [(match: String, tier: Tier)] = [("pro", .pro), ("plus", .plus)]
        /// RevenueCat's REST API v1 secret key (`apiKey` or `apiKeyFile`, SPEC §15): with it,
        /// billing-rpc pulls subscribers (`subscriptions.reconcile`, the sweeper). A secret:
        /// never logged.
        var apiKey: String? = nil
        /// The API's base URL, without `/v1`.
        var apiUrl = "https://api.revenuecat.com"
        /// `caFile`, timeouts and retries of the calls (keys beside `apiUrl`).
        var client = APIClientSettings()
        init() {}

        /// Whether subscribers can be pulled.
        var isAPIConfigured: Bool { !(apiKey ?? "").isEmpty }

        static func == (lhs: RevenueCat, rhs: RevenueCat) -> Bool {
            lhs.webhookSecret == rhs.webhookSecret && lhs.previousWebhookSecret == rhs.previousWebhookSecret
                && lhs.apiKey == rhs.apiKey && lhs.apiUrl == rhs.apiUrl && lhs.client == rhs.client
                && lhs.entitlementTiers.map(\.match) == rhs.entitlementTiers.map(\.match)
                && lhs.entitlementTiers.map(\.tier) == rhs.entitlementTiers.map(\.tier)
        }
    }

    /// App Store direct (`apple.*`).
    struct Apple: Sendable, Equatable {
        var trustedRootsFiles: [String] = []
        var bundleId: String? = nil
        var appAppleId: Int64? = nil
        var environments: [String] = ["Production", "Sandbox"]
        var serverApi = ServerAPI()
        var inAppKey = InAppKey()
        init() {}
    }

    /// The In-App Purchase key that signs App Store offers (`apple.inAppKey.*`, SPEC §17):
    /// promotional offers and introductory-offer eligibility. Unset, the key of
    /// `apple.serverApi` signs them (it is the same kind of key).
    struct InAppKey: Sendable, Equatable {
        var issuerId: String? = nil
        var keyId: String? = nil
        /// PEM (`.p8`) or, as `privateKeyFile`, the file holding it. A secret: never logged.
        var privateKey: String? = nil
        init() {}

        var isConfigured: Bool { !(issuerId ?? "").isEmpty && !(keyId ?? "").isEmpty && !(privateKey ?? "").isEmpty }
    }

    /// The App Store Server API (`apple.serverApi.*`, SPEC §11): the In-App Purchase key
    /// that signs the client's tokens, Apple's two base URLs and the client's limits.
    struct ServerAPI: Sendable, Equatable {
        var issuerId: String? = nil
        var keyId: String? = nil
        /// The In-App Purchase key (`.p8`, PKCS#8 PEM, EC P-256) or, as
        /// `privateKeyFile`, the file holding it. A secret: never logged.
        var privateKey: String? = nil
        var productionUrl = "https://api.storekit.itunes.apple.com"
        var sandboxUrl = "https://api.storekit-sandbox.itunes.apple.com"
        /// `caFile`, timeouts and retries of the calls (keys beside the URLs).
        var client = APIClientSettings()
        /// Lifetime of each token (Apple accepts at most 60 minutes).
        var tokenLifetimeSeconds = 1200
        init() {}

        /// Whether a client can be built: issuer, key id and key all set.
        var isConfigured: Bool {
            !(issuerId ?? "").isEmpty && !(keyId ?? "").isEmpty && !(privateKey ?? "").isEmpty
        }
    }

    /// How billing-rpc calls a provider's API (`apple.serverApi.*`, `revenuecat.*`): the same
    /// keys and bounds for both.
    struct APIClientSettings: Sendable, Equatable {
        /// A PEM bundle trusted for the API's URLs instead of the system's (tests: a local fake).
        var caFile: String? = nil
        /// Every call's whole duration, and its connection phase.
        var timeoutSeconds = 10
        var connectTimeoutSeconds = 5
        /// Attempts per call when the provider answers 5xx, times out or rate-limits briefly
        /// (backoff with jitter).
        var maxAttempts = 3
        /// A 429 whose Retry-After is longer than this ends the call (the target waits that
        /// long before its next pull) instead of holding the thread.
        var maxRetryAfterSeconds = 10
        init() {}
    }

    /// When billing-rpc pulls from the App Store Server API (`reconcile.*`, SPEC §11).
    struct Reconcile: Sendable, Equatable {
        /// A period that ended this long ago while set to renew, with no renewal or expiry
        /// since, is pulled.
        var afterSeconds = 3600
        /// A subscription is pulled at most once per interval.
        var intervalSeconds = 300
        /// Subscriptions looked at per sweep batch.
        var batchSize = 100
        /// A grace period or billing retry ending within this is pulled.
        var endingWithinSeconds = 86_400
        /// How often the sweeper wakes up; 0 turns it off (`subscriptions.reconcile` still works).
        var sweepEverySeconds = 60
        /// Longest wait between failed pulls of one subscription.
        var maxBackoffSeconds = 21_600
        init() {}
    }

    /// The team's services told of every change (`webhooks.*`, SPEC §16), by billing-rpc.
    struct Webhooks: Sendable, Equatable {
        var endpoints: [Endpoint] = []
        /// Every attempt's whole duration (the endpoint answers or the attempt fails), and its
        /// connection phase; `caFile` trusted instead of the system's CAs (tests: a local CA).
        var client = APIClientSettings()
        /// How long outbox rows and their deliveries are kept (beyond the three days a
        /// delivery is retried).
        var retentionDays = 7
        init() {}

        /// One receiver (`webhooks.endpoints[]`): the types it gets, signed with its secret
        /// (`secretFile`, Standard Webhooks `whsec_` + base64; a credential, never logged).
        struct Endpoint: Sendable, Equatable {
            var id: String
            var url: String
            var secret: String
            /// Some of `eventTypes`; all of them when the key is absent.
            var events: [String]
        }

        /// The outbox's row types (`AccessOutbox.RowType`), the names an endpoint subscribes to.
        static let eventTypes = ["access.changed", "event.applied"]

        /// An endpoint id: what `webhooks.*` calls and the deliveries table name it by.
        static func isValidEndpointId(_ id: String) -> Bool {
            (1...64).contains(id.utf8.count)
                && id.utf8.allSatisfy { (97...122).contains($0) || (48...57).contains($0) || $0 == 45 || $0 == 95 }
        }
    }

    /// The outbox (`outbox.*`, SPEC §16): on, every change of a user's access and every
    /// applied event is written to `billing_outbox` in its transaction, for the webhooks and
    /// live changes. Off (`enabled: false`), nothing is written, nothing can be announced
    /// (neither `webhooks.endpoints` nor `live.publisherSocket` may be set), and ingestion
    /// saves the outbox's two statements a transaction (docs/performance.md).
    struct Outbox: Sendable, Equatable {
        var enabled = true
        init() {}
    }

    /// Google Play (`google.*`, SPEC §18): the app's package, the service account that reads
    /// the Play Developer API, and what a Pub/Sub push must carry.
    struct Google: Sendable, Equatable {
        var packageName: String? = nil
        /// Google's JSON key of the service account (`type: service_account`): a credential of
        /// billing-rpc and the workers, read at start-up, never logged.
        var serviceAccountFile: String? = nil
        /// Where the service account's JWT is exchanged for an access token.
        var tokenUrl = "https://oauth2.googleapis.com/token"
        /// The Play Developer API's base URL, without `/androidpublisher/v3`.
        var apiUrl = "https://androidpublisher.googleapis.com"
        /// `caFile` (trusted instead of the system's CAs for both URLs: tests), timeouts, retries.
        var client = APIClientSettings()
        /// Google's published keys of the push's OIDC tokens.
        var pushKeysUrl = "https://www.googleapis.com/oauth2/v3/certs"
        var pushAudience: String? = nil
        var pushServiceAccount: String? = nil
        init() {}

        /// Whether the Play Developer API can be called: a package and a service account.
        var isAPIConfigured: Bool { !(packageName ?? "").isEmpty && !(serviceAccountFile ?? "").isEmpty }
    }

    /// Signed entitlement tokens (`entitlements.*`, SPEC §17): `GET /billing/access?signed=true`
    /// adds a JWS of the snapshot, signed by the first key of `signingKeyFiles` (PEM, EC
    /// P-256: ES256); `GET /billing/keys` publishes them all. The files are credentials,
    /// never logged; they are read again when they change and on SIGHUP (with the list).
    struct Entitlements: Sendable, Equatable {
        var signingKeyFiles: [String] = []
        /// The tokens' `iss`.
        var issuer = "fcgibilling"
        /// A token is valid at most this long (and never beyond the access's end): how long
        /// the app and the team's services may trust it without billing (seeds/004).
        var offlineSeconds = 259_200
        init() {}
        var isEnabled: Bool { !signingKeyFiles.isEmpty }
    }

    /// Live changes for the app (`live.*`, SPEC §16): `GET /billing/access/changes` waits in
    /// nginx (nchan), and billing-rpc publishes each committed change to the user's channel
    /// through nchan's publisher location on this Unix socket. Without it the route answers
    /// at once (a change, or 304): the app polls.
    struct Live: Sendable, Equatable {
        /// nginx's nchan publisher socket (`listen unix:…` of the publisher server); nil: off.
        var publisherSocket: String?
        init() {}
        var isEnabled: Bool { publisherSocket != nil }
    }

    /// A catalog product (`products.<id>`): the tier it grants and how it is sold. A
    /// subscription renews at its cadence; a one-time product (SPEC §15) is `lifetime` (its
    /// tier with no end), `non_renewing` (its tier for `duration`) or `consumable` (no
    /// access, no tier needed).
    struct Product: Sendable, Equatable {
        /// nil only for a consumable.
        var tier: Tier?
        var cadence: Cadence
        /// How long a `non_renewing` product grants its tier (required for those, absent otherwise).
        var duration: CatalogDuration?

        init(tier: Tier?, cadence: Cadence, duration: CatalogDuration? = nil) {
            self.tier = cadence == .consumable ? nil : tier
            self.cadence = cadence
            self.duration = duration
        }

        /// When a one-time purchase of this product made at `purchasedAt` stops granting its
        /// tier: `.some(nil)` for no end (lifetime), nil when the product is a subscription
        /// (its transactions state their own expiry).
        func oneTimeExpiry(purchasedAt: Timestamp?) -> Timestamp?? {
            switch cadence {
            case .lifetime: return .some(nil)
            case .consumable: return .some(purchasedAt)
            case .nonRenewing: return .some(duration.flatMap { d in purchasedAt.map(d.after) } ?? purchasedAt)
            default: return nil
            }
        }
    }

    /// Who may own an App Store subscription (`binding.policy`).
    struct Binding: Sendable, Equatable {
        enum Policy: String, Sendable, CaseIterable { case deny, restoreMoves = "restore_moves" }
        var policy: Policy = .deny
        init() {}
    }

    /// Which provider-side ids can name a user (`users.idPattern`, default: a UUID).
    struct Users: Sendable, Equatable {
        static let uuidPattern = "^[0-9A-Fa-f]{8}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{12}$"
        var idPattern = Users.uuidPattern
        init() {}
    }

    struct Reporting: Sendable, Equatable {
        var currency = "EUR"
        init() {}
    }

    var description: String {
        let db = database.socket.map { "socket \($0)" } ?? "\(database.host):\(database.port)\(database.tls == nil ? "" : " (TLS)")"
        let secret = (revenuecat.webhookSecret?.isEmpty ?? true) ? "unset" : "set"
        let serverApi = apple.serverApi.isConfigured ? "set" : "unset"
        let revenuecatAPI = revenuecat.isAPIConfigured ? "set" : "unset"
        return "BillingConfiguration(database: \(database.user)@\(db)/\(database.name), "
            + "threads: \(server.threadsPerWorker), admin: \(admin.socket), revenuecat secret: \(secret), "
            + "App Store Server API key: \(serverApi), RevenueCat API key: \(revenuecatAPI), products: \(products.count), "
            + "webhook endpoints: \(webhooks.endpoints.count))"
    }
}

/// A paid tier. `free` is the absence of one.
enum Tier: String, Sendable, Comparable, CaseIterable {
    case free, plus, pro

    private var rank: Int {
        switch self {
        case .free: return 0
        case .plus: return 1
        case .pro: return 2
        }
    }

    static func < (lhs: Tier, rhs: Tier) -> Bool { lhs.rank < rhs.rank }
}

/// How often a product renews; `monthlyFactor` normalizes its price to a month for MRR.
enum Cadence: String, Sendable, CaseIterable {
    case weekly, monthly, twoMonths = "two_months", quarterly, semiannual, yearly, lifetime, consumable
    /// Sold once for a fixed time (`duration`): an App Store non-renewing subscription.
    case nonRenewing = "non_renewing"

    /// Whether the product is bought once rather than renewed (SPEC §15).
    var isOneTime: Bool { self == .lifetime || self == .consumable || self == .nonRenewing }
}
