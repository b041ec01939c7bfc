/// What each counted event is to the counts (sql/026, docs/stats.md "Counts"): classified once,
/// when the refresh folds its subscription, and stored in `billing_counted_events`, so that the
/// counts of any period are one range of that table summed by MariaDB, whatever came before
/// the period. Before sql/026 each report looked at every scanned subscription's history and
/// sorted the two periods' events by subscription: a year's report of a 1M-event inbox did not
/// finish within its 10 s limit.
///
/// What the counts ask of an event is either its own ("the subscription's first counted event
/// ever", "the first report of its period", "its previous period start was a trial"), stored
/// as flags, or depends on the report's window ("the subscription's first cancellation within
/// the period"), stored as the instant of the previous event of its class: the event is the
/// first of its class within a window that begins at w exactly when that instant is before w
/// (or there is none).
extension SubscriptionStates {
    /// The kinds that count for something: sales and period starts, cancellations, losses,
    /// billing issues (as the counts read them: `SubscriptionStats.countedKind`).
    static let countedKinds: Set<String> = [
        "purchase", "renewal", "non_renewing_purchase", "cancellation", "expiration", "refund", "revoke", "billing_issue",
    ]

    /// What starts a cohort member's first paid period (docs/stats.md "Cohorts"), by the
    /// inbox's own kind: a purchase, a renewal or a pulled state (one-time purchases are in no
    /// cohort).
    static let cohortKinds: Set<String> = ["purchase", "renewal", "subscriber_state"]

    /// One row of `billing_counted_events`.
    struct Counted: Sendable, Equatable {
        var eventId: UInt64
        var at: Int64
        var kind: String
        var isTrial: Bool
        var familyShared: Bool
        var priceMilli: Int64?
        var currency: String?
        /// The period key: `purchased_at`, else `intrinsic_at` (twins of a period share it).
        var periodAt: Int64
        /// The subscription's first counted event ever.
        var firstEver: Bool
        /// The first event of its group (period start and one-time purchase; refund; billing
        /// issue) naming its period key, ever.
        var periodFirst: Bool
        /// A paid period's first report whose previous period start was a trial.
        var converted: Bool
        /// The subscription's first paid period (its cohort's: `cohortKinds`, not a trial, not
        /// family-shared, priced).
        var firstPaid: Bool
        /// Whole days from its user's sign-up to it (≥ 0; nil: no known user): the subscriber
        /// profile's, for a new subscription.
        var signupDays: Int64?
        /// The previous event of its class: a cancellation's previous cancellation, a loss's
        /// (expiration, refund, revocation) previous loss.
        var previousClassAt: Int64?
        /// A refund's previous refund, a revocation's previous revocation.
        var previousKindAt: Int64?
    }

    /// What the classification keeps between events of one subscription: a few instants and
    /// the groups reported for its latest period keys. Keys older than the kept ones are
    /// forgotten (`forgottenUpTo`); an event naming one of them cannot be classified from the
    /// stored fold, and its subscription is derived again whole.
    struct CountFold: Sendable, Equatable {
        /// Period keys kept, at most.
        static let keptPeriods = 16

        var seen = false
        /// When the first paid period began, once classified.
        var paidAt: Int64?
        var lastPeriodTrial = false
        var lastCancellation: Int64?
        var lastLoss: Int64?
        var lastRefund: Int64?
        var lastRevoke: Int64?
        /// Per period key, the groups reported (bits: 1 start, 2 refund, 4 billing issue).
        var periods: [Int64: Int] = [:]
        /// The latest key forgotten (nil: none).
        var forgottenUpTo: Int64?

        static func group(_ kind: String) -> Int {
            switch kind {
            case "purchase", "renewal", "non_renewing_purchase": 1
            case "refund": 2
            case "billing_issue": 4
            default: 0
            }
        }

        /// Whether every event can be classified from this fold (none names a forgotten key).
        func canClassify(_ events: [Event]) -> Bool {
            guard let forgottenUpTo else { return true }
            return !events.contains { e in
                Self.group(e.countedKind) != 0 && (e.purchasedAt ?? e.at) <= forgottenUpTo && periods[e.purchasedAt ?? e.at] == nil
            }
        }

        /// Classifies `e`, which comes after every event classified so far; nil for a kind that
        /// counts for nothing (it still makes the subscription seen), unless it is the first
        /// paid period (a pulled state can be).
        mutating func classify(_ e: Event) -> Counted? {
            let kind = e.countedKind
            let firstEver = !seen
            seen = true
            let firstPaid =
                paidAt == nil && SubscriptionStates.cohortKinds.contains(e.kind) && !e.isTrial && !e.familyShared
                && (e.priceMilli ?? 0) > 0
            if firstPaid { paidAt = e.at }
            let periodAt = e.purchasedAt ?? e.at
            let group = Self.group(kind)
            var periodFirst = false
            if group != 0 {
                let reported = periods[periodAt] ?? 0
                periodFirst = reported & group == 0
                periods[periodAt] = reported | group
            }
            var converted = false
            if kind == "purchase" || kind == "renewal" {
                converted = periodFirst && !e.isTrial && lastPeriodTrial
                lastPeriodTrial = e.isTrial
            }
            var previousClassAt: Int64?
            var previousKindAt: Int64?
            switch kind {
            case "cancellation":
                previousClassAt = lastCancellation
                lastCancellation = e.at
            case "expiration", "refund", "revoke":
                previousClassAt = lastLoss
                lastLoss = e.at
                if kind == "refund" {
                    previousKindAt = lastRefund
                    lastRefund = e.at
                } else if kind == "revoke" {
                    previousKindAt = lastRevoke
                    lastRevoke = e.at
                }
            default:
                break
            }
            guard SubscriptionStates.countedKinds.contains(kind) || firstPaid else { return nil }
            return Counted(
                eventId: e.id, at: e.at, kind: kind, isTrial: e.isTrial, familyShared: e.familyShared,
                priceMilli: e.priceMilli, currency: e.currency, periodAt: periodAt, firstEver: firstEver,
                periodFirst: periodFirst, converted: converted, firstPaid: firstPaid,
                signupDays: e.userCreatedAt.map { max(0, (e.at - $0) / SubscriptionStates.day) }, previousClassAt: previousClassAt,
                previousKindAt: previousKindAt)
        }

        /// Keeps the `n` latest period keys (before the fold is stored).
        mutating func forgetOldPeriods(keeping n: Int = keptPeriods) {
            guard periods.count > n else { return }
            let dropped = periods.keys.sorted().dropLast(n)
            for key in dropped { periods[key] = nil }
            forgottenUpTo = max(forgottenUpTo ?? Int64.min, dropped.last!)
        }
    }
}
