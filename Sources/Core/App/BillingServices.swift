/// What every request or admin call shares in a process: the validated configuration and
/// what was built from it once at start-up (token keys, tier rules, id pattern, catalog),
/// the process's caches and counters, the logger and the clock. Immutable (its members lock
/// themselves), so threads share one instance. Only the composition root (this folder)
/// holds it: features are built with the members they use (`BillingRoutes`,
/// `BillingRPCMethods`).
final class BillingServices: Sendable {
    let configuration: BillingConfiguration
    let logger: Logger
    let clock: any BillingClock
    let idPattern: UserIdPattern
    let tiers: TierResolver
    /// The `products` catalog, with the one cadence rule for products it does not list.
    let catalog: ProductCatalog
    /// The domain counters of this process (webhooks, usage, database errors, cache hits).
    let metrics = BillingMetrics()
    /// Who was seen today, per process (`billing_user_days`).
    let activity = UserActivity()
    /// When this process last purged expired paywall events.
    let paywallPurge = PaywallEvents.PurgeSchedule()
    /// nil when neither `auth.keysUrl` nor `auth.keysFile` is configured: authenticated
    /// routes then answer 501.
    let tokenVerifier: IDTokenVerifier?
    /// Runtime flags from `billing_flags`, cached for at most a second.
    let flags = FlagCache()
    /// Plan versions, cached briefly per process.
    let plans = PlanCatalog()
    /// Offerings contract versions, cached briefly per process.
    let offerings = OfferingCatalog()
    /// Access records of recently seen users, validated on every use (`SnapshotCache`).
    let snapshots: SnapshotCache
    /// nil when `apple.trustedRootsFiles` or `apple.bundleId` is not configured: the App
    /// Store routes then answer 501.
    let appleVerifier: AppleSignedDataVerifier?
    /// nil without `entitlements.signingKeyFiles`: `?signed=true` and `GET /billing/keys`
    /// then answer 501.
    let entitlementTokens: EntitlementTokenSigner?
    /// nil without an In-App Purchase key (`apple.inAppKey`, else `apple.serverApi`) and
    /// `apple.bundleId`: offer signatures then answer 501.
    let offerSigner: AppleOfferSigner?
    /// nil without `google.packageName` and `google.serviceAccountFile`.
    let googlePlay: GooglePlayAPI?
    /// Play purchases into the inbox and fold, for the push, the app's post, the sweeper and
    /// the quarantine's re-runs (nil with `googlePlay`).
    let googlePlayIngestion: GooglePlayIngestion?
    /// nil without `google.pushAudience` and `google.pushServiceAccount`: the Play push route
    /// then answers 501.
    let googlePush: GooglePushVerifier?
    /// Where the configuration was read from, to read `entitlements.signingKeyFiles` again on
    /// SIGHUP (nil: nothing to read again).
    let configurationSource: (path: String?, environment: [String: String])?
    /// nil when `apple.serverApi` has no key: `subscriptions.reconcile` then answers that it
    /// is not configured and billing-rpc runs no sweeper.
    let reconcile: ReconcileService?

    /// Builds everything the configuration names; a key file that cannot be read is a
    /// start-up error, not a per-request one.
    init(
        configuration: BillingConfiguration, logger: Logger = Logger(sink: .standardError),
        clock: any BillingClock = SystemClock(), configurationSource: (path: String?, environment: [String: String])? = nil
    ) throws(ConfigurationError) {
        self.configuration = configuration
        self.configurationSource = configurationSource
        self.logger = logger
        self.clock = clock
        self.snapshots = SnapshotCache(capacity: configuration.server.snapshotCacheUsers)
        guard let pattern = UserIdPattern(configuration.users.idPattern) else {
            throw ConfigurationError("users.idPattern: not a valid POSIX extended regular expression")
        }
        self.idPattern = pattern
        self.tiers = TierResolver(configuration)
        self.catalog = ProductCatalog(configuration.products)
        self.appleVerifier = try AppleSignedDataVerifier.load(configuration.apple)
        self.entitlementTokens = try EntitlementTokenSigner.load(configuration.entitlements)
        self.offerSigner = try AppleOfferSigner.load(configuration.apple)
        self.googlePlay = try GooglePlayAPI.load(configuration.google, clock: clock)
        self.googlePush = try GooglePushVerifier.load(configuration.google, logger: logger, clock: clock)
        let (tiers, metrics) = (self.tiers, self.metrics)
        self.googlePlayIngestion = googlePlay.map {
            GooglePlayIngestion(
                api: $0, tiers: tiers, idPattern: pattern, metrics: metrics, catalog: configuration.products,
                bindingPolicy: configuration.binding.policy)
        }
        self.reconcile = try ReconcileService.load(
            configuration, verifier: appleVerifier, idPattern: pattern, googlePlay: googlePlayIngestion, logger: logger, clock: clock)
        let auth = configuration.auth
        if auth.hasKeys {
            guard let issuer = auth.issuer, let audience = auth.audience else {
                throw ConfigurationError("auth.issuer and auth.audience are required with auth.keysUrl or auth.keysFile")
            }
            let store = try TokenKeyStore(
                path: auth.keysFile, issuer: auth.keysUrl.map { TokenKeyStore.Issuer(auth, url: $0) },
                clock: clock, logger: logger)
            metrics.addSource { [store, clock] in store.samples(now: clock.now()) }
            tokenVerifier = IDTokenVerifier(
                keyStore: store, issuer: issuer,
                audience: audience, leewaySeconds: configuration.auth.leewaySeconds,
                cachedTokens: configuration.server.snapshotCacheUsers)
        } else {
            tokenVerifier = nil
        }
    }

    /// Defaults only: no database, no token keys. For tests of routes that need neither.
    static func unconfigured(clock: any BillingClock = SystemClock()) -> BillingServices {
        try! BillingServices(configuration: BillingConfiguration(), clock: clock)
    }
}

extension BillingServices {
    /// A database connection wired to this process's metrics (retries are counted) and log (a
    /// transaction the server ended without an error is a warning: docs/scaling.md).
    func makeDatabaseConnection(_ configuration: DatabaseConfiguration, sessionSetup: [SQLQuery] = []) -> DatabaseConnection {
        let metrics = self.metrics
        let logger = self.logger
        return DatabaseConnection(
            configuration: configuration, sessionSetup: sessionSetup,
            onRetry: { error in
                metrics.databaseRetries.add()
                if error.isTransactionEndedByServer {
                    logger.warning("transaction ended by the server without an error; run again", ["error.message": .string(error.debugDescription)])
                }
            })
    }
}

extension BillingServices {
    /// SIGHUP: what can be taken again without a restart — the ID-token keys, from the file
    /// and the issuer's URL, and the entitlement signing keys, with their list as the
    /// configuration names it now (a failure keeps the keys in force and is logged).
    func reload() {
        if let store = tokenVerifier?.keyStore {
            do {
                let changed = try store.reload()
                logger.info("token keys reloaded", ["auth.keysChanged": .bool(changed)])
            } catch {
                logger.warning("token keys not reloaded; the keys in force stay", ["error.message": .string(error.description)])
            }
        }
        if let ring = entitlementTokens?.keys {
            do {
                var paths: [String]?
                if let source = configurationSource {
                    let files = try BillingConfiguration.load(path: source.path, environment: source.environment).entitlements.signingKeyFiles
                    // Emptied: tokens stay on (turning them off is a restart), with the keys in force.
                    if !files.isEmpty { paths = files }
                }
                let changed = try ring.reload(paths: paths)
                logger.info("entitlement signing keys reloaded", ["entitlements.keysChanged": .bool(changed)])
            } catch {
                logger.warning(
                    "entitlement signing keys not reloaded; the keys in force stay", ["error.message": .string(error.description)])
            }
        }
    }
}
