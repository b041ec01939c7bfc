/// What every request or admin call shares in a process: the validated configuration and
/// what was built from it once at start-up (token keys, tier rules, id pattern), the
/// logger and the clock. Immutable, so threads share one instance.
public final class BillingServices: Sendable {
    public let configuration: BillingConfiguration
    public let logger: Logger
    public let clock: any BillingClock
    public let idPattern: UserIdPattern
    public let tiers: TierResolver
    /// nil when `auth.keysFile` is not configured: authenticated routes then answer 501.
    public let tokenVerifier: IDTokenVerifier?
    /// Runtime flags from `billing_flags`, cached for at most a second.
    public let flags = FlagCache()
    /// Plan versions, cached briefly per process.
    public let plans = PlanCatalog()
    /// Access records of recently seen users, validated on every use (`SnapshotCache`).
    public let snapshots: SnapshotCache
    /// nil when `apple.trustedRootsFiles` or `apple.bundleId` is not configured: the App
    /// Store routes then answer 501.
    public let appleVerifier: AppleSignedDataVerifier?

    /// Builds everything the configuration names; a key file that cannot be read is a
    /// start-up error, not a per-request one.
    public init(configuration: BillingConfiguration, logger: Logger = Logger(sink: .standardError),
                clock: any BillingClock = SystemClock()) throws(ConfigurationError) {
        self.configuration = configuration
        self.logger = logger
        self.clock = clock
        self.snapshots = SnapshotCache(capacity: configuration.server.snapshotCacheUsers)
        guard let pattern = UserIdPattern(configuration.users.idPattern) else {
            throw ConfigurationError("users.idPattern: not a valid POSIX extended regular expression")
        }
        self.idPattern = pattern
        self.tiers = TierResolver(configuration)
        self.appleVerifier = try AppleSignedDataVerifier.load(configuration.apple)
        if let keysFile = configuration.auth.keysFile {
            guard let issuer = configuration.auth.issuer, let audience = configuration.auth.audience else {
                throw ConfigurationError("auth.issuer and auth.audience are required with auth.keysFile")
            }
            tokenVerifier = IDTokenVerifier(keys: try TokenKeySet.load(path: keysFile), issuer: issuer,
                                            audience: audience, leewaySeconds: configuration.auth.leewaySeconds,
                                            cachedTokens: configuration.server.snapshotCacheUsers)
        } else {
            tokenVerifier = nil
        }
    }

    /// Defaults only: no database, no token keys. For tests of routes that need neither.
    public static func unconfigured(clock: any BillingClock = SystemClock()) -> BillingServices {
        try! BillingServices(configuration: BillingConfiguration(), clock: clock)
    }
}
