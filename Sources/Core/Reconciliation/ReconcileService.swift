/// Reconciliation as billing-rpc runs it: a pull of one subscription (`pull`, for
/// `subscriptions.reconcile` and the sweeper), and a sweep over the due ones (`sweep`).
/// Built once from the configuration (`load`); shared by threads (each brings its own
/// database connection).
struct ReconcileService: Sendable {
    let reconciler: Reconciler
    let schedule: ReconcileSchedule
    let metrics: ReconcileMetrics
    /// Set by a 429 the sweeper could not wait out within the call.
    let pause = ReconcilePause()
    let logger: Logger
    let clock: any BillingClock
    /// Batches per sweep at most, so one sweep is bounded even with a large backlog.
    var maxBatchesPerSweep = 10

    /// nil when `apple.serverApi` has no key or App Store verification is not configured.
    static func load(_ configuration: BillingConfiguration, verifier: AppleSignedDataVerifier?, idPattern: UserIdPattern,
                     logger: Logger, clock: any BillingClock) throws(ConfigurationError) -> ReconcileService? {
        guard let api = try AppStoreServerAPI.load(configuration.apple, clock: clock) else { return nil }
        guard let verifier else {
            throw ConfigurationError("apple.serverApi needs apple.trustedRootsFiles and apple.bundleId (Apple's answers are verified)")
        }
        let reconciler = Reconciler(api: api, verifier: verifier, catalog: configuration.products, idPattern: idPattern,
                                    policy: configuration.binding.policy)
        return ReconcileService(reconciler: reconciler, schedule: ReconcileSchedule(configuration.reconcile),
                                metrics: ReconcileMetrics(), logger: logger, clock: clock)
    }

    enum PullResult: Sendable {
        case recorded(Reconciler.Outcome)
        case failed(subscriptionId: String, AppStoreAPIError)

        var json: JSON {
            switch self {
            case .recorded(let o):
                return ["originalTransactionId": .string(o.subscriptionId), "outcome": .string(o.changed ? "corrected" : "unchanged"),
                        "changed": .bool(o.changed), "environment": .string(o.environment.rawValue),
                        "eventsAdded": .int(Int64(o.eventsAdded)), "userId": JSON(o.userId),
                        "before": o.before?.reconcileJSON ?? .null, "after": o.after?.reconcileJSON ?? .null]
            case .failed(let id, let error):
                return ["originalTransactionId": .string(id), "outcome": .string(error.kind == .rateLimited ? "rate_limited" : "failed"),
                        "changed": false,
                        "error": ["kind": .string(error.kind.rawValue), "status": error.status.map { JSON.int(Int64($0)) } ?? .null,
                                  "errorCode": error.errorCode.map(JSON.int) ?? .null,
                                  "retryAfterSeconds": error.retryAfterSeconds.map { JSON.int(Int64($0)) } ?? .null]]
            }
        }
    }

    /// Pulls one subscription now and records it (the events, the schedule and, with an
    /// `audit`, the audit row, in one transaction). An API failure records nothing but the
    /// failure (its backoff) and that audit row, in one transaction; a database failure throws.
    ///
    /// - Parameter audit: the actor and action of an admin call, written with the change.
    func pull(subscriptionId: String, audit: (actor: String, action: String)? = nil,
              on db: DatabaseConnection) throws -> PullResult {
        let pull: Reconciler.Pull
        do {
            pull = try reconciler.fetch(subscriptionId: subscriptionId, now: clock.now())
        } catch {
            let now = clock.now()
            let result = PullResult.failed(subscriptionId: subscriptionId, error)
            let next = try db.transaction(retries: 3, isolation: .readCommitted) { db in
                let next = try schedule.recordFailure(subscriptionId, error: error, now: now, on: db)
                if let audit {
                    try AuditLog.write(actor: audit.actor, action: audit.action, targetUserId: try AppleBinding.owner(of: subscriptionId, on: db),
                                       detail: result.json, now: now, on: db)
                }
                return next
            }
            metrics.pulled(error.kind == .rateLimited ? .rateLimited : .failed)
            metrics.apiError(error)
            logger.warning("reconcile.pull.failed", ["reconcile.error": .string(error.code),
                                                     "reconcile.nextAttemptAt": .string(next.iso8601)])
            return result
        }
        let now = clock.now()
        let (outcome, pending) = try db.transaction(retries: 3, isolation: .readCommitted) { db in
            let recorded = try reconciler.record(pull, subscriptionId: subscriptionId, now: now, on: db)
            try schedule.recordSuccess(subscriptionId, environment: pull.environment, changed: recorded.outcome.changed, now: now, on: db)
            if let audit {
                try AuditLog.write(actor: audit.actor, action: audit.action, targetUserId: recorded.outcome.userId,
                                   detail: PullResult.recorded(recorded.outcome).json, now: now, on: db)
            }
            return recorded
        }
        for step in pending { try step.finish(on: db) }
        metrics.pulled(outcome.changed ? .corrected : .unchanged)
        if outcome.changed {
            logger.info("reconcile.corrected", ["reconcile.eventsAdded": .int(Int64(outcome.eventsAdded)),
                                                "reconcile.phase": .string(outcome.after?.phase.rawValue ?? "none")])
        }
        return .recorded(outcome)
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
        var lagMeasured = false
        batches: for _ in 0..<maxBatchesPerSweep {
            let now = clock.now()
            if pause.isPaused(at: now) { break }
            let due = try schedule.candidates(now: now, on: db).compactMap { c in schedule.reason(c, now: now).map { (c, $0) } }
            if !lagMeasured {
                lagMeasured = true
                summary.lagSeconds = due.map { ReconcileService.lag(of: $0.0, reason: $0.1, schedule: schedule, now: now) }.max() ?? 0
                metrics.sweepLagSeconds.set(Int(summary.lagSeconds))
            }
            var pulled = 0
            for (candidate, _) in due {
                guard keepGoing() else { break batches }
                guard try db.transaction({ db in try schedule.claim(candidate.subscriptionId, now: now, on: db) }) else { continue }
                pulled += 1
                summary.selected += 1
                switch try pull(subscriptionId: candidate.subscriptionId, on: db) {
                case .recorded(let outcome): if outcome.changed { summary.corrected += 1 } else { summary.unchanged += 1 }
                case .failed(_, let error):
                    summary.failed += 1
                    if let wait = error.retryAfterSeconds, error.kind == .rateLimited {
                        // The limit is the app's: every other pull would get the same answer.
                        pause.pause(until: clock.now().adding(milliseconds: Int64(wait) * 1000))
                        summary.rateLimited = true
                        break batches
                    }
                }
            }
            if pulled == 0 { break }
        }
        metrics.sweeps.add()
        if summary.selected > 0 {
            logger.info("reconcile.sweep", ["reconcile.selected": .int(Int64(summary.selected)),
                                            "reconcile.corrected": .int(Int64(summary.corrected)),
                                            "reconcile.failed": .int(Int64(summary.failed)),
                                            "reconcile.lagSeconds": .int(summary.lagSeconds)])
        }
        return summary
    }

    /// How long a due subscription has been waiting past the moment the rules made it due.
    static func lag(of c: ReconcileSchedule.Candidate, reason: ReconcileSchedule.Reason, schedule: ReconcileSchedule,
                    now: Timestamp) -> Int64 {
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
