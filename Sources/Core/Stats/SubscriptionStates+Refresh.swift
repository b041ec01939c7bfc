/// The refresh of the stored states (sql/025, docs/stats.md "Stored state"): the notes the
/// triggers wrote, the subscriptions they name folded on or derived again, billing-rpc's
/// background refresher.
extension SubscriptionStates {
    // MARK: - Refresh

    /// Subscriptions derived again per transaction, at most.
    static let batchSize = 2_048
    /// A transaction takes no further chunk once it has worked this long: it holds the lock
    /// row every statistic's refresh waits for (`database.lockWaitTimeoutSeconds`, 5 s by
    /// default), and a batch of long subscriptions derived whole can take a minute.
    static let batchMilliseconds = 1_000
    /// Subscriptions read, deleted and written per statement (lists are padded to this
    /// length, so each statement has one text and stays prepared).
    static let chunk = 64

    struct RefreshResult: Sendable, Equatable {
        /// Subscriptions derived again from their first event.
        var subscriptions = 0
        /// Of those, the ones derived whole for an event before their latest folded one.
        var late = 0
        /// Subscriptions folded on from their latest folded event (events after it only).
        var foldedOn = 0
        var states = 0
        /// Notes left (written after the refresh began, or the refresh was cut short).
        var pending: Int64 = 0
        /// Chunks a statement of which the statement limit stopped, derived again one
        /// subscription at a time (`deriveConfined`).
        var confined = 0
    }

    /// What the notes of one subscription ask for: the whole subscription again (an update,
    /// a replacement, or no fold stored), or the fold on from its latest event when every
    /// inserted event comes after it.
    struct Noted {
        var whole = false
        var earliest: (at: Int64, id: UInt64)?
        /// The notes (`billing_subscription_changes.id`), removed once the subscription is derived.
        var notes: [UInt64] = []

        mutating func add(at: Int64?, id: UInt64?) {
            guard let at, let id else {
                whole = true
                return
            }
            if let e = earliest, (e.at, e.id) <= (at, id) { return }
            earliest = (at, id)
        }
    }

    /// Derives again every subscription noted in `billing_subscription_changes` when the call
    /// began, one batch per transaction; `proceed` is asked between batches (a stopping
    /// daemon cuts the work short; the rest waits for the next refresh). Refreshes run one at
    /// a time (the lock row, taken before the transaction's first read), each reading one
    /// snapshot: the notes it removes and the events it folds are the same set.
    @discardableResult
    static func refresh(
        on db: DatabaseConnection, now: Timestamp, batchSize: Int = batchSize,
        keptPeriods: Int = CountFold.keptPeriods, while proceed: () -> Bool = { true }
    ) throws -> RefreshResult {
        var result = RefreshResult()
        let last = try db.queryOne("SELECT CAST(COALESCE(MAX(id), 0) AS UNSIGNED) AS last FROM billing_subscription_changes")?.uint64("last") ?? 0
        while proceed() {
            let done = try db.transaction(retries: 3) { db -> RefreshResult? in
                try db.execute("UPDATE billing_subscription_refresh SET refreshed_at = \(now) WHERE id = 1")
                // The subscriptions of the next notes; then every note of theirs, read in the
                // same snapshot as their events (below): each note removed stands for an event
                // folded, and an event folded has no note left for a later refresh to take for
                // a late one.
                var batchSubscriptions: [String: Set<[UInt8]>] = [:]
                for row in try db.query(
                    """
                    SELECT environment, subscription_id FROM billing_subscription_changes
                    WHERE id <= \(last) ORDER BY id LIMIT \(Int64(batchSize))
                    """)
                {
                    batchSubscriptions[try row.string("environment"), default: []].insert(Array(try row.string("subscription_id").utf8))
                }
                // Ids compare byte for byte, as in SQL (a String compares canonical equivalents equal).
                var noted: [String: [[UInt8]: Noted]] = [:]
                for (env, subscriptions) in batchSubscriptions {
                    let all = Array(subscriptions)
                    for start in stride(from: 0, to: all.count, by: chunk) {
                        let list = padded(all[start..<min(start + chunk, all.count)].map { SQLValue.string(String(decoding: $0, as: UTF8.self)) })
                        for row in try db.query(
                            """
                            SELECT id, subscription_id, event_at, event_id FROM billing_subscription_changes
                            WHERE environment = \(env) AND subscription_id IN (\(list: list))
                            """)
                        {
                            let key = Array(try row.string("subscription_id").utf8)
                            noted[env, default: [:]][key, default: Noted()].notes.append(try row.uint64("id"))
                            noted[env, default: [:]][key]!.add(
                                at: try row.optionalTimestamp("event_at")?.millisecondsSinceEpoch,
                                id: try row.optionalInt64("event_id").map { UInt64($0) })
                        }
                    }
                }
                guard !noted.isEmpty else { return nil }
                var batch = RefreshResult()
                var ids: [UInt64] = []
                // Chunks until the time is up (at least one): the notes of the subscriptions
                // not derived stay for the next transaction.
                let began = ContinuousClock.now
                chunks: for (env, subscriptions) in noted.sorted(by: { $0.key < $1.key }) {
                    let sorted = subscriptions.keys.sorted { $0.lexicographicallyPrecedes($1) }
                    for start in stride(from: 0, to: sorted.count, by: chunk) {
                        if !ids.isEmpty && ContinuousClock.now - began > .milliseconds(batchMilliseconds) { break chunks }
                        let part = sorted[start..<min(start + chunk, sorted.count)].map {
                            (id: String(decoding: $0, as: UTF8.self), noted: subscriptions[$0]!)
                        }
                        try deriveConfined(part, environment: env, keptPeriods: keptPeriods, into: &batch, on: db)
                        ids += part.flatMap(\.noted.notes)
                    }
                }
                for start in stride(from: 0, to: ids.count, by: chunk) {
                    let part = ids[start..<min(start + chunk, ids.count)].map(SQLValue.uint)
                    try db.execute("DELETE FROM billing_subscription_changes WHERE id IN (\(list: padded(part)))")
                }
                try db.execute(
                    """
                    UPDATE billing_subscription_refresh SET subscriptions = subscriptions + \(Int64(batch.subscriptions + batch.foldedOn))
                    WHERE id = 1
                    """)
                return batch
            }
            guard let done else { break }
            result.subscriptions += done.subscriptions
            result.late += done.late
            result.foldedOn += done.foldedOn
            result.states += done.states
            result.confined += done.confined
        }
        result.pending = try db.queryOne("SELECT COUNT(*) AS n FROM billing_subscription_changes")?.int64("n") ?? 0
        return result
    }

    /// A list padded to `chunk` values with its last one (an `IN` list means the same).
    static func padded(_ values: [SQLValue]) -> [SQLValue] {
        guard let last = values.last, values.count < chunk else { return values }
        return values + Array(repeating: last, count: chunk - values.count)
    }

    static let eventColumns = """
        e.subscription_id, e.id, e.intrinsic_at, e.kind, \(SubscriptionStats.countedKind("e")) AS counted_kind, e.user_id, e.product_id, e.is_trial, e.family_shared,
        e.price_milli, e.currency, e.purchased_at, e.expires_at, e.grace_expires_at, e.will_renew
        """

    static func event(_ row: SQLRow) throws(DatabaseError) -> Event {
        Event(
            id: try row.uint64("id"), at: try row.timestamp("intrinsic_at").millisecondsSinceEpoch,
            kind: try row.string("kind"), countedKind: try row.string("counted_kind"), userId: try row.optionalString("user_id"),
            productId: try row.optionalString("product_id"), isTrial: try row.bool("is_trial"),
            familyShared: try row.bool("family_shared"), priceMilli: try row.optionalInt64("price_milli"),
            currency: try row.optionalString("currency"),
            purchasedAt: try row.optionalTimestamp("purchased_at")?.millisecondsSinceEpoch,
            expiresAt: try row.optionalTimestamp("expires_at")?.millisecondsSinceEpoch,
            graceExpiresAt: try row.optionalTimestamp("grace_expires_at")?.millisecondsSinceEpoch,
            willRenew: try row.optionalInt64("will_renew").map { $0 != 0 },
            userCreatedAt: try row.optionalTimestamp("user_created_at")?.millisecondsSinceEpoch)
    }

    /// Brings the states of up to `chunk` noted subscriptions of one environment up to date:
    /// each whose inserted events all come after its stored fold's latest event (same
    /// replacement, no period key it forgot) is folded on from there; every other one is
    /// derived again from all its counted events, its rows replaced. Each stored fold keeps
    /// `keptPeriods` period keys (tests make it small).
    static func derive(
        _ subscriptions: [(id: String, noted: Noted)], environment env: String, keptPeriods: Int,
        into result: inout RefreshResult, on db: DatabaseConnection
    ) throws {
        let list = padded(subscriptions.map { SQLValue.string($0.id) })
        var replaced: [[UInt8]: Int64] = [:]
        for row in try db.query(
            """
            SELECT r.linked_subscription_id AS subscription_id, MIN(COALESCE(r.purchased_at, r.intrinsic_at)) AS replaced_at
            FROM billing_events r
            WHERE r.linked_subscription_id IN (\(list: list)) AND r.environment = \(env) AND r.provider = 'google_play'
              AND \(unsafeRaw: SubscriptionStats.counted("r"))
            GROUP BY r.linked_subscription_id
            """)
        {
            replaced[Array(try row.string("subscription_id").utf8)] = try row.timestamp("replaced_at").millisecondsSinceEpoch
        }
        var folds: [[UInt8]: Fold] = [:]
        for row in try db.query(
            "SELECT subscription_id, fold FROM billing_subscription_folds WHERE environment = \(env) AND subscription_id IN (\(list: list))")
        {
            folds[Array(try row.string("subscription_id").utf8)] = Fold(json: try row.json("fold"))
        }
        var whole: [String] = []
        var onward: [(id: String, fold: Fold, last: Event)] = []
        for (id, noted) in subscriptions {
            let key = Array(id.utf8)
            if !noted.whole, let earliest = noted.earliest, let fold = folds[key], let last = fold.last {
                if (last.at, last.id) >= (earliest.at, earliest.id) {
                    result.late += 1
                } else if fold.replacedAt == replaced[key] {
                    onward.append((id, fold, last))
                    continue
                }
            }
            whole.append(id)
        }
        var rows: [(String, State)] = []
        var counted: [(String, Counted)] = []
        var stored: [(String, Fold)] = []
        // The rows of the subscriptions folded on, from the earliest latest event of theirs:
        // their buckets' sums are taken out before the new rows are added, and put back after.
        var foldedOn: [String] = []
        // Of those, the ones whose first paid period is among the new rows: they join a cohort
        // now, with their earlier rows (which no cohort's sums held).
        var joinedCohort: Set<String> = []
        // The paying states counted out (deleted, or given a cohort) and in (written).
        var paying = PayingChanges()
        let onwardFrom = onward.map(\.last.at).min().map(Timestamp.init(millisecondsSinceEpoch:))
        if let from = onwardFrom {
            // Folded on: the events after the latest one each folded (one statement for the
            // chunk, from the earliest of them); the latest one's open state is bounded by the
            // first of them.
            let events = try self.counted(of: onward.map(\.id), environment: env, from: from, on: db)
            for (id, before, last) in onward {
                let after = (events[Array(id.utf8)] ?? []).filter { (last.at, last.id) < ($0.at, $0.id) }
                guard before.counts.canClassify(after) else {
                    // An event names a period key the stored fold no longer keeps.
                    whole.append(id)
                    continue
                }
                result.foldedOn += 1
                guard !after.isEmpty else { continue }
                foldedOn.append(id)
                var fold = before
                if let open = before.open {
                    paying.add(-1, open, cohortPaidAt: before.counts.paidAt)
                    try db.execute(
                        """
                        DELETE FROM billing_subscription_states
                        WHERE environment = \(env) AND span_class = \(Int64(open.spanClass))
                          AND valid_from = \(Timestamp(millisecondsSinceEpoch: open.validFrom)) AND event_id = \(open.eventId)
                        """)
                }
                let folded = fold.fold(after)
                if before.counts.paidAt == nil && fold.counts.paidAt != nil { joinedCohort.insert(id) }
                if before.firstPaid != fold.firstPaid || before.counts.paidAt != fold.counts.paidAt {
                    let ts = { (ms: Int64?) in ms.map(Timestamp.init(millisecondsSinceEpoch:)) }
                    try db.execute(
                        """
                        UPDATE billing_subscription_states SET first_paid_at = \(ts(fold.firstPaid)), cohort_paid_at = \(ts(fold.counts.paidAt))
                        WHERE environment = \(env) AND subscription_id = \(id)
                        """)
                }
                if joinedCohort.contains(id) {
                    try countStoredPaying(1, subscriptions: [id], environment: env, into: &paying, on: db)
                }
                rows += folded.states.map { (id, $0) }
                counted += folded.counted.map { (id, $0) }
                stored.append((id, fold))
            }
        }
        if !whole.isEmpty {
            let wholeList = padded(whole.map(SQLValue.string))
            let events = try self.counted(of: whole, environment: env, from: nil, on: db)
            try countStoredPaying(-1, subscriptions: whole, environment: env, into: &paying, on: db)
            try db.execute(
                "DELETE FROM billing_subscription_states WHERE environment = \(env) AND subscription_id IN (\(list: wholeList))")
            try addToBuckets(-1, subscriptions: whole, environment: env, from: nil, on: db)
            try addToCohortSums(-1, subscriptions: whole, environment: env, from: nil, on: db)
            try db.execute("DELETE FROM billing_counted_events WHERE environment = \(env) AND subscription_id IN (\(list: wholeList))")
            for id in whole {
                let key = Array(id.utf8)
                var fold = Fold(replacedAt: replaced[key])
                let folded = fold.fold(events[key] ?? [])
                rows += folded.states.map { (id, $0) }
                counted += folded.counted.map { (id, $0) }
                stored.append((id, fold))
            }
            result.subscriptions += whole.count
        }
        for i in stored.indices { stored[i].1.counts.forgetOldPeriods(keeping: keptPeriods) }
        try inChunks(rows) { try insert($0, environment: env, on: db) }
        for (_, state) in rows { paying.add(1, state, cohortPaidAt: state.cohortPaidAt) }
        try apply(paying, environment: env, on: db)
        let stayed = foldedOn.filter { !joinedCohort.contains($0) }
        try addToBuckets(-1, subscriptions: foldedOn, environment: env, from: onwardFrom, on: db)
        try addToCohortSums(-1, subscriptions: stayed, environment: env, from: onwardFrom, on: db)
        try inChunks(counted) { try insert($0, environment: env, on: db) }
        try addToBuckets(1, subscriptions: whole, environment: env, from: nil, on: db)
        try addToBuckets(1, subscriptions: foldedOn, environment: env, from: onwardFrom, on: db)
        try addToCohortSums(1, subscriptions: whole + joinedCohort.sorted(), environment: env, from: nil, on: db)
        try addToCohortSums(1, subscriptions: stayed, environment: env, from: onwardFrom, on: db)
        try inChunks(stored) { try store($0, environment: env, on: db) }
        result.states += rows.count
    }

    /// The counted events of up to `chunk` subscriptions of one environment, from `from` on
    /// (nil: all), each subscription's in (intrinsic_at, id) order.
    static func counted(
        of subscriptions: [String], environment env: String, from: Timestamp?, on db: DatabaseConnection
    ) throws -> [[UInt8]: [Event]] {
        let since: SQLQuery = from.map { "AND e.intrinsic_at >= \($0)" } ?? ""
        var events: [[UInt8]: [Event]] = [:]
        try db.forEachRow(
            """
            SELECT \(unsafeRaw: eventColumns), u.created_at AS user_created_at
            FROM billing_events e \(unsafeRaw: SubscriptionStats.perSubscriptionIndex)
            LEFT JOIN billing_users u ON u.id = e.user_id
            WHERE e.environment = \(env) AND e.subscription_id IN (\(list: padded(subscriptions.map(SQLValue.string)))) \(since)
              AND \(unsafeRaw: SubscriptionStats.counted("e"))
            ORDER BY e.subscription_id, e.intrinsic_at, e.id
            """
        ) { (row: SQLRow) throws(DatabaseError) in
            events[Array(try row.string("subscription_id").utf8), default: []].append(try event(row))
        }
        return events
    }

    /// Runs `write` over chunks of 32, 16, … 1 elements: multi-row statements of at most six
    /// texts.
    static func inChunks<T>(_ all: [T], _ write: (ArraySlice<T>) throws -> Void) throws {
        var start = 0
        var size = 32
        while start < all.count {
            while size > all.count - start { size /= 2 }
            try write(all[start..<start + size])
            start += size
        }
    }

    static func store(_ folds: ArraySlice<(String, Fold)>, environment env: String, on db: DatabaseConnection) throws {
        var values: SQLQuery = ""
        for (n, (id, fold)) in folds.enumerated() {
            if n > 0 { values.append(", ") }
            let at = fold.last.map { Timestamp(millisecondsSinceEpoch: $0.at) }
            values.append("(\(env), \(id), \(at), \(fold.last?.id), \(fold.json))")
        }
        try db.execute(
            """
            INSERT INTO billing_subscription_folds (environment, subscription_id, last_at, last_id, fold)
            VALUES \(values)
            ON DUPLICATE KEY UPDATE last_at = VALUES(last_at), last_id = VALUES(last_id), fold = VALUES(fold)
            """)
    }

    private static func insert(_ rows: ArraySlice<(String, Counted)>, environment env: String, on db: DatabaseConnection) throws {
        func ts(_ ms: Int64?) -> Timestamp? { ms.map(Timestamp.init(millisecondsSinceEpoch:)) }
        var values: SQLQuery = ""
        for (n, (id, c)) in rows.enumerated() {
            if n > 0 { values.append(", ") }
            values.append(
                """
                (\(env), \(ts(c.at)), \(c.eventId), \(id), \(c.kind), \(c.isTrial), \(c.familyShared), \(c.priceMilli), \(c.currency),
                 \(ts(c.periodAt)), \(c.firstEver), \(c.periodFirst), \(c.converted), \(c.firstPaid), \(c.signupDays),
                 \(ts(c.previousClassAt)), \(ts(c.previousKindAt)))
                """)
        }
        try db.execute(
            """
            INSERT INTO billing_counted_events (environment, intrinsic_at, event_id, subscription_id, kind, is_trial, family_shared,
              price_milli, currency, period_at, first_ever, period_first, converted, first_paid, signup_days, previous_class_at,
              previous_kind_at)
            VALUES \(values)
            """)
    }

    private static func insert(_ rows: ArraySlice<(String, State)>, environment env: String, on db: DatabaseConnection) throws {
        func ts(_ ms: Int64?) -> Timestamp? { ms.map(Timestamp.init(millisecondsSinceEpoch:)) }
        var values: SQLQuery = ""
        for (n, (id, s)) in rows.enumerated() {
            if n > 0 { values.append(", ") }
            values.append(
                """
                (\(env), \(Int64(s.spanClass)), \(ts(s.validFrom)), \(s.eventId), \(ts(s.activeUntil)), \(id), \(s.userId),
                 \(s.productId), \(s.isTrial), \(s.familyShared), \(s.cancelling), \(s.priceMilli), \(s.currency),
                 \(ts(s.paidAt)), \(s.periodSeconds), \(ts(s.firstPaidAt)), \(ts(s.cohortPaidAt)))
                """)
        }
        try db.execute(
            """
            INSERT INTO billing_subscription_states (environment, span_class, valid_from, event_id, active_until,
              subscription_id, user_id, product_id, is_trial, family_shared, cancelling, price_milli, currency, paid_at,
              period_seconds, first_paid_at, cohort_paid_at)
            VALUES \(values)
            """)
    }
}
