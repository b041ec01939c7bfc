/// The statistics' stored state (sql/025, docs/stats.md "Stored state"): each subscription's
/// state after each of its counted events, for as long as it is active, in
/// `billing_subscription_states`. The set of subscriptions active at an instant (the
/// snapshots, the MRR movement, paying users, cohort retention) is then one range of that
/// table per length class, where deriving it from the inbox cost five lookups per candidate.
///
/// The inbox stays the truth: triggers note every subscription whose inbox rows change, and
/// `refresh` folds each noted subscription again from all its counted events (`states(of:)`)
/// and replaces its rows, so an event that arrives late, a user found or erased, a Play
/// replacement all land the same way.
enum SubscriptionStates {
    /// Instants are compared in milliseconds (DATETIME(3)).
    static let day: Int64 = 86_400_000
    /// A state of class c is active for at most 2^c days; the last class has no bound.
    static let unboundedClass = 16

    /// One counted inbox event of a subscription, as the states read it.
    struct Event: Sendable, Equatable {
        var id: UInt64
        var at: Int64
        var kind: String
        /// The kind as the counts read it (`SubscriptionStats.countedKind`: a Google Play state
        /// is its order's purchase or renewal).
        var countedKind: String
        var userId: String?
        var productId: String?
        var isTrial: Bool
        var familyShared: Bool
        var priceMilli: Int64?
        var currency: String?
        var purchasedAt: Int64?
        var expiresAt: Int64?
        var graceExpiresAt: Int64?
        var willRenew: Bool?
        /// When its user signed up (`billing_users.created_at`; nil: no known user).
        var userCreatedAt: Int64? = nil
    }

    /// The subscription after `eventId`, active at t when `validFrom < t < activeUntil`.
    struct State: Sendable, Equatable {
        var eventId: UInt64
        var validFrom: Int64
        var activeUntil: Int64
        var userId: String?
        var productId: String?
        var isTrial: Bool
        var familyShared: Bool
        var cancelling: Bool
        var priceMilli: Int64?
        var currency: String?
        var paidAt: Int64?
        var periodSeconds: Int64?
        var firstPaidAt: Int64?
        /// When its cohort's first paid period began (docs/stats.md "Cohorts"; one-time
        /// purchases are in no cohort, unlike `firstPaidAt`).
        var cohortPaidAt: Int64? = nil

        /// The smallest c with activeUntil − validFrom ≤ 2^c days (`unboundedClass` at most).
        var spanClass: Int {
            let span = activeUntil - validFrom
            var c = 0
            while c < SubscriptionStates.unboundedClass && span > (Int64(1) << c) * SubscriptionStates.day { c += 1 }
            return c
        }
    }

    static let periodStartKinds: Set<String> = [
        "purchase", "renewal", "promotional", "temporary_grant", "non_renewing_purchase", "subscriber_state",
    ]
    static let renewalIntentKinds: Set<String> = ["purchase", "renewal", "cancellation", "uncancellation", "pause"]
    static let lostKinds: Set<String> = ["expiration", "refund", "revoke"]
    /// What a first paid period is (MRR's reactivation vs new): a sale at a price, not a
    /// trial, not family-shared.
    static let paidKinds: Set<String> = ["purchase", "renewal", "non_renewing_purchase", "subscriber_state"]

    /// The states of one subscription from all its counted events, sorted by (at, id), and
    /// when a Play replacement ends it (`replacedAt`; it is not active from then on).
    static func states(of events: [Event], replacedAt: Int64?) -> [State] {
        var fold = Fold(replacedAt: replacedAt)
        return fold.fold(events).states
    }

    /// The fold of one subscription's counted events in (at, id) order, resumable: what it
    /// keeps after an event is all the next events need (stored in
    /// `billing_subscription_folds`), so events that arrive after the latest one are folded on
    /// from there.
    ///
    /// After each event E, for the instants t with E.at < t ≤ the next event's at (the events
    /// before t are E and those before it):
    /// - the period in force is the latest period start (`periodStartKinds`); its product,
    ///   trial, family sharing and price count, else the latest event's;
    /// - cancelling is the latest renewal intent: `will_renew` false, or without one a
    ///   cancellation or pause (a purchase, renewal or uncancellation says it renews);
    /// - access ends at E's expiry or grace, else the latest expiry or grace stated before;
    ///   a refund or revocation of a period older than the period in force ends only that
    ///   period, so the period in force's expiry stands; the grace of the latest billing issue
    ///   since the period began keeps access even when a later notice states none;
    /// - an expiration, refund or revocation (not of an older period) ends access at E.
    struct Fold: Sendable, Equatable {
        var replacedAt: Int64?
        var period: Event?
        var cancelling = false
        var latestExpiry: Int64?
        var issueGrace: Int64?
        /// The first paid sale's instant (MRR's reactivation vs new), once one was folded.
        var firstPaid: Int64?
        /// The latest event folded.
        var last: Event?
        /// Its state, not yet bounded by a next event (nil: none, or not active).
        var open: State?
        /// What the counts' classification keeps.
        var counts = CountFold()

        init(replacedAt: Int64?) { self.replacedAt = replacedAt }

        /// Folds `events` (after every event folded so far) and returns the states to write:
        /// the previous latest event's, now bounded, then each new event's, the last one open;
        /// each with the first paid instant as it now stands. And the rows of
        /// `billing_counted_events` for the events that count.
        mutating func fold(_ events: [Event]) -> (states: [State], counted: [Counted]) {
            var states = events.compactMap { add($0) }
            if let open { states.append(open) }
            let counted = events.compactMap { counts.classify($0) }
            for i in states.indices {
                states[i].firstPaidAt = firstPaid
                states[i].cohortPaidAt = counts.paidAt
            }
            return (states, counted)
        }

        /// Folds `e`, which comes after every event folded so far; returns the previous
        /// event's state, now bounded by `e`, when it is active at some instant.
        mutating func add(_ e: Event) -> State? {
            var closed: State?
            if var previous = open {
                previous.activeUntil = min(previous.activeUntil, e.at + 1)
                if previous.activeUntil > previous.validFrom + 1 { closed = previous }
            }
            last = e
            open = nil
            if firstPaid == nil, paidKinds.contains(e.kind), !e.isTrial, !e.familyShared, (e.priceMilli ?? 0) > 0 {
                firstPaid = e.at
            }
            if periodStartKinds.contains(e.kind) {
                period = e
                issueGrace = nil
            }
            if e.willRenew != nil || renewalIntentKinds.contains(e.kind) {
                cancelling = e.willRenew == false || (e.willRenew == nil && (e.kind == "cancellation" || e.kind == "pause"))
            }
            if e.kind == "billing_issue", let grace = e.graceExpiresAt { issueGrace = grace }
            let ownExpiry = e.expiresAt.map { max($0, e.graceExpiresAt ?? $0) }
            defer { if let ownExpiry { latestExpiry = ownExpiry } }

            var earlierRefund = false
            if e.kind == "refund" || e.kind == "revoke", let refunded = e.purchasedAt, let current = period?.purchasedAt {
                earlierRefund = refunded < current
            }
            if lostKinds.contains(e.kind) && !earlierRefund { return closed }
            let access = earlierRefund ? period?.expiresAt : (ownExpiry ?? latestExpiry)
            var until = max(access ?? 0, issueGrace ?? 0)
            if let replacedAt { until = min(until, replacedAt) }
            guard until > e.at + 1 else { return closed }

            let isTrial = period?.isTrial ?? e.isTrial
            var periodSeconds: Int64?
            if !isTrial, let p = period, let bought = p.purchasedAt, let expires = p.expiresAt, expires > bought {
                periodSeconds = (expires - bought) / 1000
            }
            open = State(
                eventId: e.id, validFrom: e.at, activeUntil: until, userId: e.userId,
                productId: period?.productId ?? e.productId, isTrial: isTrial,
                familyShared: period?.familyShared ?? e.familyShared, cancelling: cancelling,
                priceMilli: period?.priceMilli, currency: period?.currency,
                paidAt: period.map { $0.purchasedAt ?? $0.at }, periodSeconds: periodSeconds, firstPaidAt: nil)
            return closed
        }
    }

    // MARK: - Reading

    /// `FROM … WHERE …` of the states active at `t` (alias `s`): for each length class c, the
    /// states of that class begun in the 2^c days before t (a state active at t began less
    /// than its length before t), one index range each.
    static func active(at t: Timestamp, environment env: String) -> SQLQuery {
        """
        FROM billing_subscription_states s
        WHERE s.environment = \(env) AND \(activeWindow(at: t))
        """
    }

    /// The condition of a state active at `t` (alias `s`, any environment), with the primary
    /// key's ranges it can be in (`classRanges`).
    static func activeWindow(at t: Timestamp) -> SQLQuery {
        "(\(classRanges(at: t)) AND s.valid_from < \(t) AND s.active_until > \(t))"
    }

    /// The primary key's ranges that can hold a state active at `t`: per length class c,
    /// the states that began at most 2^c days before t (all of the unbounded class).
    static func classRanges(at t: Timestamp) -> SQLQuery {
        var classes: SQLQuery = "("
        for c in 0..<unboundedClass {
            let earliest = t.adding(milliseconds: -(Int64(1) << c) * day)
            classes.append("(s.span_class = \(Int64(c)) AND s.valid_from >= \(earliest)) OR ")
        }
        classes.append("s.span_class = \(Int64(unboundedClass)))")
        return classes
    }

    /// The primary key's ranges of length class `c` that can hold a state active at one or
    /// more of `instants` (sorted, not empty), as conditions of one statement each: the
    /// windows [t − 2^c days, t) merged where they overlap (all of the unbounded class before
    /// the last instant), cut into pieces of at most max(31, 2^c) days of `valid_from`. The
    /// pieces part the states: each is read once. A superset: a state in them may be active
    /// at none of the instants (the caller checks).
    ///
    /// Short conditions, short statements: MariaDB checks the whole condition on every row it
    /// reads, and the OR of every class's windows for 53 weekly instants (173 terms: the short
    /// classes' windows do not overlap) took 30.5 s to count a year's 8M states at 10M events,
    /// where 17 terms took 8.2 s; and a year of monthly states in one statement outlasts the
    /// 9.5 s statement limit there, where a month of them is read in about a second.
    static func classRanges(at instants: [Timestamp], spanClass c: Int) -> [SQLQuery] {
        guard c < unboundedClass else {
            return ["(s.span_class = \(Int64(c)) AND s.valid_from < \(instants[instants.count - 1]))"]
        }
        return classPieces(at: instants, spanClass: c).map { windows in
            var ranges: SQLQuery = "(s.span_class = \(Int64(c)) AND ("
            for (n, range) in windows.enumerated() {
                ranges.append("\(unsafeRaw: n == 0 ? "" : " OR ")(s.valid_from >= \(range.from) AND s.valid_from < \(range.to))")
            }
            ranges.append("))")
            return ranges
        }
    }

    /// `classRanges`' `valid_from` windows of a bounded class `c`, piece by piece.
    static func classPieces(at instants: [Timestamp], spanClass c: Int) -> [[(from: Timestamp, to: Timestamp)]] {
        let length = (Int64(1) << c) * day
        let longest = max(31 * day, length)
        var merged: [(from: Timestamp, to: Timestamp)] = []
        for t in instants {
            let from = t.adding(milliseconds: -length)
            if let last = merged.last, from <= last.to {
                merged[merged.count - 1].to = t
            } else {
                merged.append((from, t))
            }
        }
        // Pieces of consecutive windows spanning at most `longest`; a longer window cut.
        var pieces: [[(from: Timestamp, to: Timestamp)]] = []
        for var window in merged {
            while window.to.millisecondsSinceEpoch - window.from.millisecondsSinceEpoch > longest {
                let cut = window.from.adding(milliseconds: longest)
                pieces.append([(window.from, cut)])
                window.from = cut
            }
            if let start = pieces.last?.first?.from, window.to.millisecondsSinceEpoch - start.millisecondsSinceEpoch <= longest {
                pieces[pieces.count - 1].append(window)
            } else {
                pieces.append([window])
            }
        }
        return pieces
    }

    /// A state that pays: not a trial, not family-shared, its period priced.
    static let paid = "(s.is_trial = 0 AND s.family_shared = 0 AND s.price_milli > 0)"
}
