/// Reconciliation as billing-rpc runs it: a pull of one App Store subscription or one
/// RevenueCat subscriber (`pull`, `pullRevenueCat`, for `subscriptions.reconcile` and the
/// sweeper), and a sweep over the due ones of both (`sweep`). Built once from the
/// configuration (`load`); shared by threads (each brings its own database connection).
struct ReconcileService: Sendable {
    /// nil when the App Store Server API is not configured.
    let reconciler: Reconciler?
    /// nil when RevenueCat's REST API is not configured (`revenuecat.apiKey`).
    let revenuecat: RevenueCatReconciler?
    /// nil when the Play Developer API is not configured (`google.packageName`,
    /// `google.serviceAccountFile`).
    let google: GooglePlayIngestion?
    let schedule: ReconcileSchedule
    let metrics: ReconcileMetrics
    /// Set by a 429 the sweeper could not wait out within the call, per provider (the
    /// limit is the app's with that provider).
    let pauses: [ReconcileProvider: ReconcilePause] = Dictionary(uniqueKeysWithValues: ReconcileProvider.allCases.map { ($0, ReconcilePause()) })
    let logger: Logger
    let clock: any BillingClock
    /// Batches per sweep at most, so one sweep is bounded even with a large backlog.
    var maxBatchesPerSweep = 10

    init(
        reconciler: Reconciler?, revenuecat: RevenueCatReconciler? = nil, google: GooglePlayIngestion? = nil,
        schedule: ReconcileSchedule, metrics: ReconcileMetrics, logger: Logger, clock: any BillingClock
    ) {
        self.reconciler = reconciler
        self.revenuecat = revenuecat
        self.google = google
        self.schedule = schedule
        self.metrics = metrics
        self.logger = logger
        self.clock = clock
    }

    /// nil when none of `apple.serverApi` (with App Store verification), `revenuecat.apiKey`
    /// and the Play Developer API (`googlePlay`) is configured.
    static func load(
        _ configuration: BillingConfiguration, verifier: AppleSignedDataVerifier?, idPattern: UserIdPattern,
        googlePlay google: GooglePlayIngestion? = nil, logger: Logger, clock: any BillingClock
    ) throws(ConfigurationError) -> ReconcileService? {
        var reconciler: Reconciler?
        if let api = try AppStoreServerAPI.load(configuration.apple, clock: clock) {
            guard let verifier else {
                throw ConfigurationError("apple.serverApi needs apple.trustedRootsFiles and apple.bundleId (Apple's answers are verified)")
            }
            reconciler = Reconciler(
                api: api, verifier: verifier, catalog: configuration.products, idPattern: idPattern,
                policy: configuration.binding.policy)
        }
        let revenuecat = try RevenueCatAPI.load(configuration.revenuecat).map {
            RevenueCatReconciler(api: $0, tiers: TierResolver(configuration), catalog: configuration.products)
        }
        guard reconciler != nil || revenuecat != nil || google != nil else { return nil }
        return ReconcileService(
            reconciler: reconciler, revenuecat: revenuecat, google: google, schedule: ReconcileSchedule(configuration.reconcile),
            metrics: ReconcileMetrics(), logger: logger, clock: clock)
    }

    /// What one pull gave: recorded (with what it changed), or an API failure.
    struct PullResult: Sendable {
        var provider: ReconcileProvider
        /// The originalTransactionId, or the RevenueCat app user id.
        var target: String
        var changed: Bool
        var error: ProviderAPIError?
        /// What the admin call answers of it.
        var json: JSON

        static func failed(_ provider: ReconcileProvider, target: String, _ error: ProviderAPIError) -> PullResult {
            var json: JSONObject
            switch provider {
            case .apple: json = ["originalTransactionId": .string(target)]
            case .revenuecat: json = ["provider": "revenuecat", "userId": .string(target)]
            case .google: json = ["provider": "google", "subscriptionId": .string(target)]
            }
            json["outcome"] = .string(error.kind == .rateLimited ? "rate_limited" : "failed")
            json["changed"] = false
            json["error"] = [
                "kind": .string(error.kind.rawValue), "status": error.status.map { JSON.int(Int64($0)) } ?? .null,
                "errorCode": error.errorCode.map(JSON.int) ?? .null,
                "retryAfterSeconds": error.retryAfterSeconds.map { JSON.int(Int64($0)) } ?? .null,
            ]
            return PullResult(provider: provider, target: target, changed: false, error: error, json: .object(json))
        }

        static func recorded(_ o: Reconciler.Outcome) -> PullResult {
            PullResult(
                provider: .apple, target: o.subscriptionId, changed: o.changed, error: nil,
                json: [
                    "originalTransactionId": .string(o.subscriptionId), "outcome": .string(o.changed ? "corrected" : "unchanged"),
                    "changed": .bool(o.changed), "environment": .string(o.environment.rawValue),
                    "eventsAdded": .int(Int64(o.eventsAdded)), "userId": JSON(o.userId),
                    "before": o.before?.reconcileJSON ?? .null, "after": o.after?.reconcileJSON ?? .null,
                ])
        }

        static func recorded(_ o: RevenueCatReconciler.Outcome) -> PullResult {
            PullResult(provider: .revenuecat, target: o.userId, changed: o.changed, error: nil, json: o.json)
        }
    }

    /// Pulls one App Store subscription now and records it (`pull(_:target:...)`).
    func pull(
        subscriptionId: String, audit: (actor: String, action: String)? = nil,
        on db: DatabaseConnection
    ) throws -> PullResult {
        guard let reconciler else { throw BillingError(.conflict, "the App Store Server API is not configured (apple.serverApi)") }
        return try pull(
            .apple, target: subscriptionId, audit: audit, on: db,
            owner: { db throws(DatabaseError) in try AppleBinding.owner(of: subscriptionId, on: db) },
            fetch: { () throws(ProviderAPIError) in try reconciler.fetch(subscriptionId: subscriptionId, now: clock.now()) },
            record: { pulled, now, db in
                let recorded = try reconciler.record(pulled, subscriptionId: subscriptionId, now: now, on: db)
                return (.recorded(recorded), recorded.userId, pulled.environment)
            })
    }

    /// Pulls one Play purchase token the server knows (by its `gp:` subscription id) now,
    /// records its state and acknowledges it if it is not yet (`pull(_:target:...)`).
    func pullGoogle(
        subscriptionId: String, audit: (actor: String, action: String)? = nil,
        on db: DatabaseConnection
    ) throws -> PullResult {
        guard let google else {
            throw BillingError(
                .conflict, "the Play Developer API is not configured (google.packageName, google.serviceAccountFile)",
                data: ["reason": "not_configured"])
        }
        guard let (token, kind) = try db.transaction({ db in try GooglePlayIngestion.token(of: subscriptionId, on: db) }) else {
            throw BillingError.notFound("Google Play purchase", ["subscriptionId": .string(subscriptionId)])
        }
        var read: GooglePlayRead?
        let result = try pull(
            .google, target: subscriptionId, audit: audit, on: db,
            owner: { db throws(DatabaseError) in try GooglePlayIngestion.owner(token: token, on: db) },
            fetch: { () throws(ProviderAPIError) in try google.read(token: token, kind: kind) },
            record: { subscription, now, db in
                read = subscription
                let before = try Self.subscription(subscriptionId, on: db)
                let recorded = try google.recordInTransaction(
                    subscription, token: token, cause: "PULL", providerEventId: nil, poster: nil, readAt: now, on: db)
                let after = try Self.subscription(subscriptionId, on: db)
                let changed = Reconciler.essence(before) != Reconciler.essence(after)
                let json: JSON = [
                    "provider": "google", "subscriptionId": .string(subscriptionId), "outcome": .string(changed ? "corrected" : "unchanged"),
                    "changed": .bool(changed), "state": .string(subscription.state),
                    "eventsAdded": .int(recorded.ingestion.duplicate ? 0 : 1), "userId": JSON(recorded.owner),
                    "before": before?.reconcileJSON ?? .null, "after": after?.reconcileJSON ?? .null,
                ]
                let environment: StoreEnvironment = subscription.isTest ? .sandbox : .production
                return (PullResult(provider: .google, target: subscriptionId, changed: changed, error: nil, json: json), recorded.owner, environment)
            })
        if let read { google.acknowledgeIfNeeded(read, token: token, now: clock.now(), logger: logger, on: db) }
        return result
    }

    /// A Play subscription's folded state (its owner's row), if any.
    private static func subscription(_ subscriptionId: String, on db: DatabaseConnection) throws(DatabaseError) -> SubscriptionState? {
        try db.queryOne(
            """
            SELECT \(unsafeRaw: SubscriptionState.columns) FROM billing_subscriptions s
            WHERE s.subscription_id = \(subscriptionId) AND s.provider = \(EventProvider.googlePlay.rawValue) LIMIT 1
            """
        ).map { (row) throws(DatabaseError) in try SubscriptionState(row: row) }
    }

    /// Pulls one RevenueCat subscriber now and records it (`pull(_:target:...)`).
    func pullRevenueCat(
        userId: String, audit: (actor: String, action: String)? = nil,
        on db: DatabaseConnection
    ) throws -> PullResult {
        guard let revenuecat else { throw BillingError(.conflict, "RevenueCat's REST API is not configured (revenuecat.apiKey)") }
        return try pull(
            .revenuecat, target: userId, audit: audit, on: db,
            owner: { _ in userId },
            fetch: { () throws(ProviderAPIError) in try revenuecat.fetch(userId: userId) },
            record: { pulled, now, db in
                let recorded = try revenuecat.record(pulled, userId: userId, now: now, on: db)
                return (.recorded(recorded), userId, nil)
            })
    }

    /// One pull, whichever the provider: `fetch` outside any transaction; then the events,
    /// the schedule and, with an `audit`, the audit row, in one transaction. An API failure
    /// records nothing but the failure (its backoff) and that audit row, in one transaction;
    /// a database failure throws.
    ///
    /// - Parameter audit: the actor and action of an admin call, written with the change.
    private func pull<Pulled>(
        _ provider: ReconcileProvider, target: String, audit: (actor: String, action: String)?,
        on db: DatabaseConnection,
        owner: (DatabaseConnection) throws(DatabaseError) -> String?,
        fetch: () throws(ProviderAPIError) -> Pulled,
        record: (Pulled, Timestamp, DatabaseConnection) throws
            -> (PullResult, userId: String?, environment: StoreEnvironment?)
    )
        throws -> PullResult
    {
        let pulled: Pulled
        do {
            pulled = try fetch()
        } catch {
            let now = clock.now()
            let result = PullResult.failed(provider, target: target, error)
            let next = try db.transaction(retries: 3, isolation: .readCommitted) { db in
                let next = try schedule.recordFailure(target, provider: provider, error: error, now: now, on: db)
                if let audit {
                    try AuditLog.write(
                        actor: audit.actor, action: audit.action, targetUserId: try owner(db), detail: result.json,
                        now: now, on: db)
                }
                return next
            }
            metrics.pulled(error.kind == .rateLimited ? .rateLimited : .failed, provider: provider)
            metrics.apiError(error, provider: provider)
            logger.warning(
                "reconcile.pull.failed",
                [
                    "reconcile.provider": .string(provider.rawValue), "reconcile.error": .string(error.code),
                    "reconcile.nextAttemptAt": .string(next.iso8601),
                ])
            return result
        }
        let now = clock.now()
        let result = try db.transaction(retries: 3, isolation: .readCommitted) { db in
            let recorded = try record(pulled, now, db)
            try schedule.recordSuccess(
                target, provider: provider, environment: recorded.environment, changed: recorded.0.changed,
                now: now, on: db)
            if let audit {
                try AuditLog.write(
                    actor: audit.actor, action: audit.action, targetUserId: recorded.userId, detail: recorded.0.json,
                    now: now, on: db)
            }
            return recorded.0
        }
        metrics.pulled(result.changed ? .corrected : .unchanged, provider: provider)
        if result.changed {
            logger.info(
                "reconcile.corrected",
                [
                    "reconcile.provider": .string(provider.rawValue),
                    "reconcile.eventsAdded": result.json["eventsAdded"] ?? .null,
                ])
        }
        return result
    }

    struct SweepSummary: Sendable, Equatable {
        var selected = 0
        var corrected = 0
        var unchanged = 0
        var failed = 0
        var lagSeconds: Int64 = 0
        /// A 429 stopped the sweep; it resumes after Retry-After.
        var rateLimited = false
    }

    /// One sweep: batches of due subscriptions (`ReconcileSchedule.reason`), each claimed
    /// then pulled, until none is due, `maxBatchesPerSweep` batches were done, or Apple
    /// rate-limited us beyond what a call waits (the sweeper then pauses for Retry-After).
    ///
    /// - Parameter keepGoing: asked before each pull; false ends the sweep there (a stop).
    func sweep(on db: DatabaseConnection, while keepGoing: () -> Bool = { true }) throws -> SweepSummary {
        var summary = SweepSummary()
        var lag: Int64?
        var providers: [ReconcileProvider] = []
        if reconciler != nil { providers.append(.apple) }
        if revenuecat != nil { providers.append(.revenuecat) }
        if google != nil { providers.append(.google) }
        for provider in providers {
            try sweep(provider, on: db, into: &summary, lag: &lag, while: keepGoing)
        }
        if google != nil {
            try sweepAcknowledgements(on: db, into: &summary, while: keepGoing)
            try sweepVoided(on: db, into: &summary)
        }
        summary.lagSeconds = lag ?? 0
        metrics.sweepLagSeconds.set(Int(summary.lagSeconds))
        metrics.sweeps.add()
        if summary.selected > 0 {
            logger.info(
                "reconcile.sweep",
                [
                    "reconcile.selected": .int(Int64(summary.selected)),
                    "reconcile.corrected": .int(Int64(summary.corrected)),
                    "reconcile.failed": .int(Int64(summary.failed)),
                    "reconcile.lagSeconds": .int(summary.lagSeconds),
                ])
        }
        return summary
    }

    /// One provider's part of a sweep: batches of its due targets (an App Store subscription,
    /// or a RevenueCat subscriber once however many of his subscriptions are due), each
    /// claimed then pulled.
    private func sweep(
        _ provider: ReconcileProvider, on db: DatabaseConnection, into summary: inout SweepSummary,
        lag: inout Int64?, while keepGoing: () -> Bool
    ) throws {
        let pause = pauses[provider]!
        var lagMeasured = false
        for _ in 0..<maxBatchesPerSweep {
            let now = clock.now()
            if pause.isPaused(at: now) { return }
            var due: [(ReconcileSchedule.Candidate, ReconcileSchedule.Reason)] = []
            var targets = Set<String>()
            for c in try schedule.candidates(now: now, provider: provider, on: db) {
                guard let reason = schedule.reason(c, now: now), targets.insert(c.target).inserted else { continue }
                due.append((c, reason))
            }
            if !lagMeasured {
                lagMeasured = true
                let worst = due.map { ReconcileService.lag(of: $0.0, reason: $0.1, schedule: schedule, now: now) }.max() ?? 0
                lag = max(lag ?? 0, worst)
            }
            var pulled = 0
            for (candidate, _) in due {
                guard keepGoing() else { return }
                guard try db.transaction({ db in try schedule.claim(candidate.target, provider: provider, now: now, on: db) }) else { continue }
                pulled += 1
                summary.selected += 1
                let result: PullResult
                switch provider {
                case .apple: result = try pull(subscriptionId: candidate.target, on: db)
                case .revenuecat: result = try pullRevenueCat(userId: candidate.target, on: db)
                case .google: result = try pullGoogle(subscriptionId: candidate.target, on: db)
                }
                guard tally(result, pause: pause, into: &summary) else { return }
            }
            if pulled == 0 { return }
        }
    }

    /// Play purchases still to acknowledge (Google refunds them after three days): each
    /// claimed on the schedule (so it is tried at most once per `reconcile.intervalSeconds`,
    /// backing off after failures), read again, recorded and acknowledged (`pullGoogle`).
    private func sweepAcknowledgements(on db: DatabaseConnection, into summary: inout SweepSummary, while keepGoing: () -> Bool) throws {
        let pause = pauses[.google]!
        let now = clock.now()
        if pause.isPaused(at: now) { return }
        let waiting = try db.transaction { db in
            try GooglePlayIngestion.unacknowledged(now: now, limit: schedule.batchSize, on: db)
        }
        for subscriptionId in waiting {
            guard keepGoing() else { return }
            guard try db.transaction({ db in try schedule.claim(subscriptionId, provider: .google, now: now, on: db) }) else { continue }
            summary.selected += 1
            guard tally(try pullGoogle(subscriptionId: subscriptionId, on: db), pause: pause, into: &summary) else { return }
        }
    }

    /// The schedule row of the Voided Purchases API's listing (provider google).
    static let voidedPurchasesTarget = "voidedpurchases"

    /// Purchases Google voided (refunds, cancellations, chargebacks) whose notification may
    /// have been lost: at most once per `reconcile.intervalSeconds`, the Voided Purchases
    /// API's list since the last listing (a day of overlap, at most the 30 days it keeps),
    /// each entry of a token the server knows recorded as the refund a push would have been
    /// (the same key: one void is one event, whichever came first).
    private func sweepVoided(on db: DatabaseConnection, into summary: inout SweepSummary) throws {
        guard let google else { return }
        let target = Self.voidedPurchasesTarget
        let now = clock.now()
        if pauses[.google]!.isPaused(at: now) { return }
        guard try db.transaction({ db in try schedule.claim(target, provider: .google, now: now, on: db) }) else { return }
        let last = try db.transaction { db in
            try db.queryOne(
                "SELECT last_success_at FROM billing_reconcile_state WHERE provider = 'google' AND subscription_id = \(target)"
            )?.optionalTimestamp("last_success_at")
        }
        let oldest = now.adding(milliseconds: -30 * 86_400_000)
        let since = max(oldest, (last ?? oldest).adding(milliseconds: -86_400_000))
        var voided: [GooglePlayVoidedPurchase] = []
        do {
            var page: String?
            for _ in 0..<20 {
                let answer = try google.api.voidedPurchases(since: since, pageToken: page)
                voided += answer.purchases
                guard let next = answer.nextPageToken else { break }
                page = next
            }
        } catch {
            summary.failed += 1
            metrics.pulled(error.kind == .rateLimited ? .rateLimited : .failed, provider: .google)
            metrics.apiError(error, provider: .google)
            logger.warning("reconcile.voided.failed", ["reconcile.error": .string(error.code)])
            _ = try db.transaction(retries: 3) { db in try schedule.recordFailure(target, provider: .google, error: error, now: now, on: db) }
            return
        }
        var recorded = 0
        for item in voided {
            let event = GooglePlayEvent.voided(
                token: item.purchaseToken, orderId: item.orderId, at: item.voidedAt, reason: item.reason, rawType: "VOIDED_PURCHASES_API")
            let known = try db.transaction { db in
                try db.queryOne("SELECT 1 AS known FROM billing_google_purchases WHERE subscription_id = \(event.subscriptionId)") != nil
            }
            guard known else { continue }  // a purchase this server never saw: nothing it granted here
            let outcome = try google.recordNotice(event, payload: ["voidedPurchase": item.payload], now: now, on: db)
            if !outcome.duplicate { recorded += 1 }
        }
        try db.transaction(retries: 3) { db in
            try schedule.recordSuccess(target, provider: .google, environment: nil, changed: recorded > 0, now: now, on: db)
        }
        metrics.pulled(recorded > 0 ? .corrected : .unchanged, provider: .google)
        summary.selected += 1
        if recorded > 0 {
            summary.corrected += 1
            logger.info("reconcile.voided", ["reconcile.listed": .int(Int64(voided.count)), "reconcile.eventsAdded": .int(Int64(recorded))])
        } else {
            summary.unchanged += 1
        }
    }

    /// Counts a sweep's pull; false when a 429 the call could not wait out stopped the sweep
    /// of that provider (the limit is the app's: every other pull would get the same answer).
    private func tally(_ result: PullResult, pause: ReconcilePause, into summary: inout SweepSummary) -> Bool {
        if let error = result.error {
            summary.failed += 1
            if let wait = error.retryAfterSeconds, error.kind == .rateLimited {
                pause.pause(until: clock.now().adding(milliseconds: Int64(wait) * 1000))
                summary.rateLimited = true
                return false
            }
        } else if result.changed {
            summary.corrected += 1
        } else {
            summary.unchanged += 1
        }
        return true
    }

    /// How long a due subscription has been waiting past the moment the rules made it due.
    static func lag(
        of c: ReconcileSchedule.Candidate, reason: ReconcileSchedule.Reason, schedule: ReconcileSchedule,
        now: Timestamp
    ) -> Int64 {
        var dueAt: Timestamp?
        switch reason {
        case .renewalOverdue: dueAt = c.expiresAt?.adding(milliseconds: schedule.afterMilliseconds)
        case .graceEnding: dueAt = c.graceExpiresAt?.adding(milliseconds: -schedule.endingWithinMilliseconds)
        case .billingRetryEnding:
            dueAt = c.expiresAt?.adding(milliseconds: ReconcileSchedule.billingRetryMilliseconds - schedule.endingWithinMilliseconds)
        }
        if let next = c.nextAttemptAt, next > (dueAt ?? next) { dueAt = next }
        guard let dueAt else { return 0 }
        return max(0, (now.millisecondsSinceEpoch - dueAt.millisecondsSinceEpoch) / 1000)
    }
}
