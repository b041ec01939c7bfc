import Synchronization

/// Counters of what the domain layers decide (webhook outcomes, usage decisions, database
/// errors and retries): one instance per process, made by the composition root and handed
/// to whoever counts. Fixed label sets, so every counter is preallocated and counting is
/// one relaxed atomic add (no lock, no allocation).
final class BillingMetrics: Sendable {
    /// Gauges that other parts of the process own (the token key set), read at publish time.
    private let sources = Mutex<[@Sendable () -> [MetricSample]]>([])

    /// Adds `source`'s samples to every publication of this process's metrics.
    func addSource(_ source: @escaping @Sendable () -> [MetricSample]) {
        sources.withLock { $0.append(source) }
    }

    enum WebhookProvider: String, CaseIterable, Sendable {
        case revenuecat, apple, google
    }

    /// What became of one webhook delivery (or posted transaction).
    enum WebhookOutcome: String, CaseIterable, Sendable {
        /// Recorded and folded into a known user's access.
        case applied
        /// Already in the inbox: answered again, nothing written.
        case duplicate
        /// Recorded, but no known user yet: folded when the user becomes known.
        case unmatched
        /// Recorded and deliberately not applied (test event, unknown type).
        case ignored
        /// Kept aside for an operator (e.g. a signature chain that does not verify).
        case quarantined
        /// Refused before anything was written (bad secret, malformed payload).
        case rejected
    }

    enum UsageDecision: String, CaseIterable, Sendable {
        /// Recorded within the allowance.
        case allowed
        /// Recorded over the allowance (observe mode).
        case overLimit = "over_limit"
        /// Refused with 402 (enforce mode); nothing recorded.
        case refused
    }

    enum DatabaseErrorKind: String, CaseIterable, Sendable {
        /// Connection refused or lost (answered 503).
        case unavailable
        /// Deadlock or lock wait timeout still failing after the bounded retries (503).
        case lockConflict = "lock_conflict"
        /// Anything else (a bug: the generic 500).
        case other
    }

    /// What `POST /billing/apple/offer-signatures` signed or refused (SPEC §17).
    enum OfferSignatureKind: String, CaseIterable, Sendable {
        case promotional, introductory
    }
    enum OfferSignatureOutcome: String, CaseIterable, Sendable {
        /// Signed and answered.
        case signed
        /// 403 `offer_not_eligible`: not the user's stage, purchases disabled, unknown product.
        case refused
    }

    private let webhooks: [MetricCounter]
    private let offerSignatures: [MetricCounter]
    /// Entitlement tokens signed (`GET /billing/access?signed=true`).
    let entitlementTokens = MetricCounter()
    /// Google Play purchases this process acknowledged at Google, and calls that failed
    /// (retried: Google refunds a purchase left unacknowledged for three days).
    let googleAcknowledged = MetricCounter()
    let googleAcknowledgeFailures = MetricCounter()
    private let usage: [MetricCounter]
    private let databaseErrors: [MetricCounter]
    /// Transactions rolled back and run again after a deadlock or lock wait timeout.
    let databaseRetries = MetricCounter()
    /// Access snapshots served from the snapshot cache, and those read in full.
    let snapshotCacheHits = MetricCounter()
    let snapshotCacheMisses = MetricCounter()

    init() {
        webhooks = (0..<(WebhookProvider.allCases.count * WebhookOutcome.allCases.count)).map { _ in MetricCounter() }
        usage = UsageDecision.allCases.map { _ in MetricCounter() }
        databaseErrors = DatabaseErrorKind.allCases.map { _ in MetricCounter() }
        offerSignatures = (0..<(OfferSignatureKind.allCases.count * OfferSignatureOutcome.allCases.count)).map { _ in MetricCounter() }
    }

    func offerSignature(_ kind: OfferSignatureKind, _ outcome: OfferSignatureOutcome) {
        offerSignatureCounter(kind, outcome).add()
    }

    private func offerSignatureCounter(_ kind: OfferSignatureKind, _ outcome: OfferSignatureOutcome) -> MetricCounter {
        let k = OfferSignatureKind.allCases.firstIndex(of: kind)!
        return offerSignatures[k * OfferSignatureOutcome.allCases.count + OfferSignatureOutcome.allCases.firstIndex(of: outcome)!]
    }

    func webhook(_ provider: WebhookProvider, _ outcome: WebhookOutcome) {
        webhookCounter(provider, outcome).add()
    }

    func usageDecision(_ decision: UsageDecision) {
        usage[UsageDecision.allCases.firstIndex(of: decision)!].add()
    }

    func databaseError(_ kind: DatabaseErrorKind) {
        databaseErrors[DatabaseErrorKind.allCases.firstIndex(of: kind)!].add()
    }

    /// Counts `error` when it is a database error (called where errors meet the client).
    func databaseError(from error: any Error) {
        guard let error = error as? DatabaseError else { return }
        databaseError(error.isUnavailable ? .unavailable : error.isDeadlockOrLockWait ? .lockConflict : .other)
    }

    private func webhookCounter(_ provider: WebhookProvider, _ outcome: WebhookOutcome) -> MetricCounter {
        let p = WebhookProvider.allCases.firstIndex(of: provider)!
        let o = WebhookOutcome.allCases.firstIndex(of: outcome)!
        return webhooks[p * WebhookOutcome.allCases.count + o]
    }

    /// Every counter as samples (zeros included, so rates start from a baseline).
    func samples() -> [MetricSample] {
        var samples: [MetricSample] = []
        for provider in WebhookProvider.allCases {
            for outcome in WebhookOutcome.allCases {
                samples.append(
                    MetricSample(
                        "billing_webhook_events_total",
                        ["provider": provider.rawValue, "outcome": outcome.rawValue],
                        Double(webhookCounter(provider, outcome).current)))
            }
        }
        for (index, decision) in UsageDecision.allCases.enumerated() {
            samples.append(MetricSample("billing_usage_decisions_total", ["outcome": decision.rawValue], Double(usage[index].current)))
        }
        for (index, kind) in DatabaseErrorKind.allCases.enumerated() {
            samples.append(MetricSample("billing_db_errors_total", ["kind": kind.rawValue], Double(databaseErrors[index].current)))
        }
        samples.append(MetricSample("billing_db_retries_total", [:], Double(databaseRetries.current)))
        for kind in OfferSignatureKind.allCases {
            for outcome in OfferSignatureOutcome.allCases {
                samples.append(
                    MetricSample(
                        "billing_offer_signatures_total", ["kind": kind.rawValue, "outcome": outcome.rawValue],
                        Double(offerSignatureCounter(kind, outcome).current)))
            }
        }
        samples.append(MetricSample("billing_entitlement_tokens_total", [:], Double(entitlementTokens.current)))
        samples.append(MetricSample("billing_google_acknowledgements_total", ["outcome": "acknowledged"], Double(googleAcknowledged.current)))
        samples.append(MetricSample("billing_google_acknowledgements_total", ["outcome": "failed"], Double(googleAcknowledgeFailures.current)))
        samples.append(MetricSample("billing_snapshot_cache_total", ["result": "hit"], Double(snapshotCacheHits.current)))
        samples.append(MetricSample("billing_snapshot_cache_total", ["result": "miss"], Double(snapshotCacheMisses.current)))
        for source in sources.withLock({ $0 }) { samples += source() }
        return samples
    }
}
