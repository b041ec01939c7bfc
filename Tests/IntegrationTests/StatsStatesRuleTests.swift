import Testing

@testable import Core

/// The rule of the stored states (sql/025, docs/stats.md "Stored state"): at every instant,
/// the subscriptions `SubscriptionStates.active(at:)` reads, with everything the statistics
/// read of each (product, trial, family sharing, cancelling, user, price, currency, purchase
/// day, period length, first paid instant), equal those derived from the inbox alone
/// (`derivedActiveSubscriptions`, the definition before the stored states) — whatever the
/// order the events arrived in, whenever the refreshes ran between them, and after a user is
/// found for unmatched events (the update trigger).
@Suite struct StatsStatesRuleTests {
    static let instants = [
        "2026-01-05T00:00:00Z", "2026-01-20T08:00:00Z", "2026-02-01T00:00:00Z", "2026-02-01T00:00:00.001Z",
        "2026-02-14T12:00:00Z", "2026-03-01T00:00:00Z", "2026-03-10T00:00:00Z", "2026-04-01T00:00:00Z",
        "2026-05-15T00:00:00Z",
    ].map { Timestamp(iso8601: $0)! }
    static let day: Int64 = 86_400_000
    static let kinds = [
        "purchase", "purchase", "renewal", "renewal", "cancellation", "uncancellation", "expiration", "billing_issue",
        "billing_issue", "refund", "revoke", "pause", "product_change", "promotional", "temporary_grant",
        "non_renewing_purchase", "extension", "transfer", "test", "price_increase", "refund_reversed",
    ]

    @Test(arguments: 0..<16)
    func storedStatesEqualTheDerivedSetAtEveryInstantInEveryArrivalOrder(seed: Int) throws {
        try withStatsDatabase { db in
            var random = SplitMix(seed: UInt64(seed) &+ 0x5747_E500)
            let rows = Self.randomRows(&random, subscriptions: 5 + seed % 5)
            var order = Array(rows.indices)
            for i in stride(from: order.count - 1, to: 0, by: -1) { order.swapAt(i, random.next(i + 1)) }
            var inserted: [StatsFixture.Row] = []
            for i in order {
                try StatsFixture.insert(rows[i], id: "st-\(i)", on: db)
                inserted.append(rows[i])
                // A user found for one subscription's unmatched events, then a later event of
                // it, before the next refresh: the update asks for the whole subscription.
                if random.next(5) == 0, let found = inserted.first(where: { $0.status == "unmatched" && $0.sub != nil }) {
                    try db.execute(
                        """
                        UPDATE billing_events SET status = 'applied', user_id = 'found'
                        WHERE status = 'unmatched' AND subscription_id = \(found.sub) AND environment = \(found.env)
                        """)
                    for k in inserted.indices where inserted[k].sub == found.sub && inserted[k].env == found.env && inserted[k].status == "unmatched"
                    {
                        inserted[k].status = "applied"
                    }
                    var later = found
                    later.kind = "renewal"
                    later.status = "applied"
                    later.user = "found"
                    later.at = "2026-07-01T00:00:00Z"
                    later.expires = "2026-08-01T00:00:00Z"
                    try StatsFixture.insert(later, id: "st-later-\(inserted.count)", on: db)
                    inserted.append(later)
                }
                if random.next(4) == 0 {
                    try SubscriptionStates.refresh(on: db, now: Self.instants[0])
                    var some = Self.instantsToCompare(inserted)
                    for i in stride(from: some.count - 1, to: 0, by: -1) { some.swapAt(i, random.next(i + 1)) }
                    try Self.compare(at: Array(some.prefix(12)), seed: seed, on: db)
                }
            }
            let done = try SubscriptionStates.refresh(on: db, now: Self.instants[0])
            #expect(done.pending == 0)
            try Self.compare(at: Self.instantsToCompare(inserted), seed: seed, on: db)
            try Self.compareTwoInstantReads(Self.instantsToCompare(inserted), seed: seed, on: db)
            try Self.compareManyInstantReads(Self.instantsToCompare(inserted), seed: seed, on: db)
            // Their user found: the unmatched events become applied (the update trigger notes
            // their subscriptions), and the states say whose they are.
            try db.execute(
                "UPDATE billing_events SET status = 'applied', user_id = CONCAT('late-', subscription_id) WHERE status = 'unmatched'")
            try SubscriptionStates.refresh(on: db, now: Self.instants[0])
            try Self.compare(at: Self.instantsToCompare(inserted), seed: seed, on: db)
        }
    }

    /// The edges the random inboxes reach rarely, each arriving in order and in reverse with a
    /// refresh after every event: a billing issue's grace outlived by a new period (it no
    /// longer counts), a refund of the period in force (its purchase instant equal: access
    /// ends) and of an older one (the later period stands), a grace on the latest event, a
    /// pause and a renewal intent on a product change, a Play replacement, ties at one instant.
    @Test(arguments: 0..<6, [false, true])
    func edgesEqualTheDerivedSet(edge: Int, reversed: Bool) throws {
        let a = Timestamp(iso8601: "2026-02-01T00:00:00Z")!
        func at(_ days: Int64, _ ms: Int64 = 0) -> String { a.adding(milliseconds: days * Self.day + ms).iso8601 }
        func row(_ kind: String, _ t: String, sub: String = "E1", bought: String? = nil, expires: String? = nil) -> StatsFixture.Row {
            var r = StatsFixture.Row(kind: kind, sub: sub, at: t)
            r.user = "EU"
            r.price = 4_990
            r.purchased = bought
            r.expires = expires
            return r
        }
        var rows: [StatsFixture.Row]
        switch edge {
        case 0:
            var issue = row("billing_issue", at(25), bought: at(0), expires: at(30))
            issue.grace = at(45)
            rows = [row("purchase", at(0), bought: at(0), expires: at(30)), issue, row("renewal", at(30), bought: at(30), expires: at(31))]
        case 1:
            rows = [row("purchase", at(0), bought: at(0), expires: at(30)), row("refund", at(5), bought: at(0), expires: at(5))]
        case 2:
            rows = [
                row("purchase", at(0), bought: at(0), expires: at(30)), row("renewal", at(30), bought: at(30), expires: at(60)),
                row("refund", at(40), bought: at(0), expires: at(40)),
            ]
        case 3:
            var issue = row("billing_issue", at(30), bought: at(0), expires: at(30))
            issue.grace = at(46)
            var late = row("billing_issue", at(35))
            late.grace = nil
            rows = [row("purchase", at(0), bought: at(0), expires: at(30)), issue, late]
        case 4:
            var change = row("product_change", at(10), expires: at(30))
            change.willRenew = false
            rows = [row("purchase", at(0), bought: at(0), expires: at(30)), row("pause", at(5)), change, row("uncancellation", at(12))]
        default:
            var first = row("subscriber_state", at(0), sub: "E2", bought: at(0), expires: at(30))
            first.provider = "google_play"
            var replacement = row("subscriber_state", at(10), sub: "E3", bought: at(10, 1), expires: at(40))
            replacement.provider = "google_play"
            replacement.linked = "E2"
            var tie = row("cancellation", at(10), sub: "E3")
            tie.provider = "google_play"
            rows = [first, replacement, tie, row("renewal", at(10), sub: "E3", bought: at(10), expires: at(41))]
        }
        if reversed { rows.reverse() }
        try withStatsDatabase { db in
            var inserted: [StatsFixture.Row] = []
            var foldedOn = 0
            for (n, r) in rows.enumerated() {
                try StatsFixture.insert(r, id: "e-\(n)", on: db)
                inserted.append(r)
                foldedOn += try SubscriptionStates.refresh(on: db, now: a).foldedOn
                try Self.compare(at: Self.instantsToCompare(inserted), seed: -edge, on: db)
                try Self.compareTwoInstantReads(Self.instantsToCompare(inserted), seed: -edge, on: db)
                try Self.compareManyInstantReads(Self.instantsToCompare(inserted), seed: -edge, on: db)
            }
            // In order, each event after the first is folded on from the one before it (the
            // Play replacement excepted: it derives the replaced subscription whole).
            if !reversed { #expect(foldedOn >= rows.count - 2, "edge \(edge): \(foldedOn) folded on") }
        }
    }

    /// A refresh takes in only what committed before its reads: notes written after it began
    /// stay for the next one, and nothing noted is lost (the notes it read are the ones it
    /// removes).
    @Test func aNoteWrittenAfterTheRefreshBeganStaysForTheNext() throws {
        try withStatsDatabase { db in
            var row = StatsFixture.Row(kind: "purchase", sub: "N1", at: "2026-02-01T00:00:00Z")
            row.user = "NU1"
            row.price = 4_990
            row.expires = "2026-03-01T00:00:00Z"
            try StatsFixture.insert(row, id: "n-1", on: db)
            var calls = 0
            let first = try SubscriptionStates.refresh(on: db, now: Self.instants[0]) {
                calls += 1
                if calls == 2 {
                    var renewal = row
                    renewal.kind = "renewal"
                    renewal.at = "2026-03-01T00:00:00Z"
                    renewal.expires = "2026-04-01T00:00:00Z"
                    try? StatsFixture.insert(renewal, id: "n-2", on: db)
                }
                return true
            }
            #expect(first.subscriptions == 1)
            #expect(first.pending == 1)
            let second = try SubscriptionStates.refresh(on: db, now: Self.instants[0])
            #expect(second.foldedOn == 1 && second.subscriptions == 0 && second.pending == 0)
            try Self.compare(at: [Timestamp(iso8601: "2026-03-15T00:00:00Z")!], seed: -1, on: db)
            let active = try db.queryOne(
                "SELECT COUNT(*) AS n \(SubscriptionStates.active(at: Timestamp(iso8601: "2026-03-15T00:00:00Z")!, environment: "production"))")
            #expect(try active?.int64("n") == 1)
        }
    }

    /// A batch takes every note of its subscriptions: the notes of events folded in one batch
    /// are not left for the next, where they would read as late events and derive the
    /// subscription whole.
    @Test func aBatchTakesEveryNoteOfItsSubscriptions() throws {
        try withStatsDatabase { db in
            func renewal(_ sub: String, _ day: Int64) -> StatsFixture.Row {
                var r = StatsFixture.Row(
                    kind: day == 0 ? "purchase" : "renewal", sub: sub, at: Self.instants[0].adding(milliseconds: day * Self.day).iso8601)
                r.user = "BU-\(sub)"
                r.price = 4_990
                r.expires = Self.instants[0].adding(milliseconds: (day + 30) * Self.day).iso8601
                return r
            }
            try StatsFixture.insert(renewal("BA", 0), id: "b-0", on: db)
            try SubscriptionStates.refresh(on: db, now: Self.instants[0])
            for (n, row) in [renewal("BA", 30), renewal("BB", 0), renewal("BA", 60), renewal("BB", 30)].enumerated() {
                try StatsFixture.insert(row, id: "b-\(n + 1)", on: db)
            }
            let done = try SubscriptionStates.refresh(on: db, now: Self.instants[0], batchSize: 1)
            #expect(done.foldedOn == 1 && done.subscriptions == 1 && done.pending == 0, "\(done)")
            try Self.compare(at: Self.instantsToCompare([renewal("BA", 60), renewal("BB", 30)]), seed: -100, on: db)
        }
    }

    /// Random subscriptions of every kind the states read: ties at one instant, expiries
    /// missing, far away or before the event, grace periods, renewal intents, refunds of
    /// older and current periods, statuses that do not count, unmatched users, two
    /// environments, ids differing only by a trailing space, and Google Play replacements.
    static func randomRows(_ random: inout SplitMix, subscriptions: Int) -> [StatsFixture.Row] {
        var rows: [StatsFixture.Row] = []
        let far = Timestamp(iso8601: "2031-01-01T00:00:00Z")!
        for s in 0..<subscriptions {
            let sub = s == 1 ? "T0 " : "T\(s)"
            let env = s == subscriptions - 1 ? "sandbox" : "production"
            let play = s % 3 == 2
            var periods: [String] = []
            for _ in 0..<(1 + random.next(9)) {
                var at = instants[random.next(instants.count)]
                if random.next(3) == 0 { at = at.adding(milliseconds: Int64(random.next(20)) * day + Int64(random.next(3)) - 1) }
                let kind =
                    play ? ["subscriber_state", "subscriber_state", "cancellation", "expiration"][random.next(4)] : kinds[random.next(kinds.count)]
                var row = StatsFixture.Row(kind: kind, sub: sub, at: at.iso8601)
                row.env = env
                row.provider = play ? "google_play" : ["revenuecat", "apple_notification"][random.next(2)]
                row.product = ["app.plus.monthly", "app.pro.yearly", nil][random.next(3)]
                row.trial = random.next(5) == 0
                row.familyShared = random.next(7) == 0
                row.price = [nil, 0, 4_990, 9_990, -4_990][random.next(5)]
                row.currency = ["EUR", "USD", "JPY"][random.next(3)]
                row.purchased = [nil, at, instants[random.next(instants.count)]][random.next(3)]?.iso8601
                row.expires =
                    [
                        nil, at.adding(milliseconds: 7 * day), at.adding(milliseconds: 30 * day), at.adding(milliseconds: -day), far,
                        instants[random.next(instants.count)],
                    ][random.next(6)]?.iso8601
                // A billing issue's grace, often beyond the next period's expiry; a refund of
                // a period of this subscription, older or current.
                row.grace =
                    (kind == "billing_issue" ? random.next(4) != 0 : random.next(12) == 0)
                    ? at.adding(milliseconds: Int64(3 + random.next(40)) * day).iso8601 : nil
                if kind == "refund" || kind == "revoke", !periods.isEmpty, random.next(2) == 0 {
                    row.purchased = periods[random.next(periods.count)]
                }
                if let bought = row.purchased { periods.append(bought) }
                row.willRenew = [nil, nil, true, false][random.next(4)]
                row.status = ["applied", "applied", "applied", "unmatched", "ignored", "failed"][random.next(6)]
                row.user = "TU\(s)"
                if play && s >= 3 && random.next(2) == 0 { row.linked = "T\(s - 3)" }
                rows.append(row)
            }
        }
        return rows
    }

    /// Each instant an event, expiry, grace or purchase names, a millisecond either side, and
    /// one far in the future.
    static func instantsToCompare(_ rows: [StatsFixture.Row]) -> [Timestamp] {
        var set = Set<Timestamp>([Timestamp(iso8601: "2029-06-01T00:00:00Z")!])
        for r in rows {
            for text in [r.at, r.expires, r.grace, r.purchased] {
                guard let text, let t = Timestamp(iso8601: text) else { continue }
                for d in Int64(-1)...1 { set.insert(t.adding(milliseconds: d)) }
            }
        }
        return set.sorted()
    }

    /// `stats.subscriptions` reads both instants' states in one scan (`forEachActiveState`):
    /// for pairs of instants near and far (the same one twice included), the rows it flags as at the
    /// start and at the end are the states `active(at:)` reads at each, a state active at both
    /// is one row flagged twice, and the rows come in the order of their subscriptions' bytes.
    static func compareTwoInstantReads(_ instants: [Timestamp], seed: Int, on db: DatabaseConnection) throws {
        for env in ["production", "sandbox"] {
            let single = try instants.map { t in
                Set(
                    try db.query("SELECT s.subscription_id, s.event_id \(SubscriptionStates.active(at: t, environment: env))").map {
                        "\(try $0.string("subscription_id"))|\(try $0.int64("event_id"))"
                    })
            }
            for i in instants.indices {
                for j in Set([i, i + 1, i + 2, i + 5, i + 17, instants.count - 1]) where j < instants.count {
                    var starts: [String] = []
                    var ends: [String] = []
                    var order: [String] = []
                    try SubscriptionStats.forEachActiveState(
                        environment: env, at: instants[i], and: instants[j], bySubscription: true, on: db
                    ) { s in
                        if s.atStart { starts.append(s.subscriptionId) }
                        if s.atEnd { ends.append(s.subscriptionId) }
                        order.append(s.subscriptionId)
                    }
                    let label = "seed \(seed) \(env) \(instants[i].iso8601) \(instants[j].iso8601)"
                    #expect(starts.sorted() == single[i].map { String($0.split(separator: "|")[0]) }.sorted(), "\(label)")
                    #expect(ends.sorted() == single[j].map { String($0.split(separator: "|")[0]) }.sorted(), "\(label)")
                    #expect(order.count == single[i].union(single[j]).count, "\(label)")
                    #expect(zip(order, order.dropFirst()).allSatisfy { !$1.utf8.lexicographicallyPrecedes($0.utf8) }, "\(label)")
                }
            }
        }
    }

    /// `stats.snapshots` reads every instant's states in one scan (`forEachActiveState(at:)`):
    /// for all the instants, every other one and every fifth, each row's instants are exactly
    /// those at which `active(at:)` reads its state, and each state is one row; and
    /// `snapshots(at:)`, asked in another order with an instant twice, equals the end
    /// snapshot of the two-instant read at each instant.
    static func compareManyInstantReads(_ instants: [Timestamp], seed: Int, on db: DatabaseConnection) throws {
        for env in ["production", "sandbox"] {
            let single = try instants.map { t in
                try db.query("SELECT s.subscription_id \(SubscriptionStates.active(at: t, environment: env))").map {
                    try $0.string("subscription_id")
                }.sorted()
            }
            for step in [1, 2, 5] {
                let picked = Array(stride(from: 0, to: instants.count, by: step))
                var read = [[String]](repeating: [], count: picked.count)
                var rows = 0
                try SubscriptionStats.forEachActiveState(environment: env, at: picked.map { instants[$0] }, on: db) { state, active in
                    rows += 1
                    for k in active { read[k].append(state.subscriptionId) }
                }
                let label = "seed \(seed) \(env) every \(step)"
                for (k, i) in picked.enumerated() { #expect(read[k].sorted() == single[i], "\(label) at \(instants[i].iso8601)") }
                // A state active at several instants is one row: as many rows as states.
                let states = try picked.reduce(into: Set<String>()) { all, i in
                    for row in try db.query("SELECT s.subscription_id, s.event_id \(SubscriptionStates.active(at: instants[i], environment: env))") {
                        all.insert("\(try row.string("subscription_id"))|\(try row.int64("event_id"))")
                    }
                }
                #expect(rows == states.count, "\(label)")
            }
            let asked = Array(instants.prefix(40).reversed()) + instants.prefix(1)
            let snapshots = try SubscriptionStats.snapshots(
                at: asked, environment: env, currency: "EUR", cadence: { _ in nil }, on: db)
            #expect(snapshots.count == asked.count)
            for (t, snapshot) in zip(asked, snapshots) {
                let q = SubscriptionStats.Query(
                    from: t, to: t.adding(milliseconds: 1), environment: StoreEnvironment(rawValue: env)!, currency: "EUR")
                let two = try SubscriptionStats.instants(q, snapshotAt: t, cadence: { _ in nil }, on: db)
                #expect(snapshot.json == two.end.json, "seed \(seed) \(env) snapshot at \(t.iso8601)")
            }
        }
    }

    static func compare(at instants: [Timestamp], seed: Int, on db: DatabaseConnection) throws {
        for env in ["production", "sandbox"] {
            for t in instants {
                let stored = try db.query(
                    """
                    SELECT s.subscription_id, s.product_id, s.is_trial, s.family_shared, s.cancelling, s.user_id,
                      COALESCE(s.currency, 'XXX') AS currency, DATE(s.paid_at) AS day, s.price_milli,
                      COALESCE(\(unsafeRaw: SubscriptionStates.paid), 0) AS paid, s.period_seconds, s.first_paid_at
                    \(SubscriptionStates.active(at: t, environment: env))
                    """
                ).map(Self.describe)
                let derived = try db.query(
                    """
                    SELECT z.subscription_id, COALESCE(pe.product_id, le.product_id) AS product_id,
                      \(unsafeRaw: SubscriptionStats.derivedIsTrial) AS is_trial,
                      \(unsafeRaw: SubscriptionStats.derivedIsShared) AS family_shared,
                      COALESCE(z.cancelling, 0) AS cancelling, le.user_id, COALESCE(pe.currency, 'XXX') AS currency,
                      DATE(COALESCE(pe.purchased_at, pe.intrinsic_at)) AS day, pe.price_milli,
                      COALESCE(\(unsafeRaw: SubscriptionStats.derivedPaidPeriod), 0) AS paid,
                      CASE WHEN \(unsafeRaw: SubscriptionStats.derivedIsTrial) = 0 AND pe.expires_at > pe.purchased_at
                        THEN TIMESTAMPDIFF(SECOND, pe.purchased_at, pe.expires_at) END AS period_seconds,
                      (SELECT MIN(p.intrinsic_at) FROM billing_events p
                       WHERE p.environment = \(env) AND p.subscription_id = z.subscription_id AND \(unsafeRaw: SubscriptionStats.counted("p"))
                         AND p.kind IN ('purchase', 'renewal', 'non_renewing_purchase', 'subscriber_state')
                         AND p.is_trial = 0 AND p.family_shared = 0 AND p.price_milli > 0) AS first_paid_at
                    \(SubscriptionStats.derivedActiveSubscriptions(at: t, environment: env))
                    """
                ).map(Self.describe)
                #expect(stored.sorted() == derived.sorted(), "seed \(seed) \(env) at \(t.iso8601)")
            }
        }
    }

    static func describe(_ row: SQLRow) throws -> String {
        let columns = [
            "subscription_id", "product_id", "is_trial", "family_shared", "cancelling", "user_id", "currency", "day",
            "price_milli", "paid", "period_seconds", "first_paid_at",
        ]
        return try columns.map { name -> String in
            switch try row.value(name) {
            case .null: return "-"
            case .int(let v): return String(v)
            case .uint(let v): return String(v)
            case .string(let v): return "[\(v)]"
            case .timestamp(let v): return v.iso8601
            case .double(let v): return String(v)
            case .bytes(let v): return String(decoding: v, as: UTF8.self)
            }
        }.joined(separator: "|")
    }
}
