/// Who owns an App Store subscription (SPEC §5 "Binding", seeds/004): each
/// `originalTransactionId` is bound to at most one user (`billing_apple_bindings` primary
/// key), and App Store events of the subscription fold into that user only.
///
/// Lock order, everywhere: the binding row, then users' access rows in id order.
enum AppleBinding {
    enum Decision: Sendable, Equatable {
        /// The caller is now the first owner.
        case bound
        /// The caller already owned it (idempotent).
        case alreadyOwned
        /// `restore_moves` with `restore: true`: moved from the previous owner.
        case moved(from: String)
        /// Another user owns it and the policy refuses (audited; the caller answers 409).
        case denied(owner: String)
    }

    static let appleProviders: [SQLValue] = [
        .string(EventProvider.appleNotification.rawValue),
        .string(EventProvider.appleTransaction.rawValue),
    ]

    /// Binds (or checks) `subscriptionId` for `userId`, who must be known, in one
    /// transaction: audit, move of the App Store events to the new owner and re-fold of
    /// every user whose access changed. A denial is committed (its audit row) and returned.
    static func bind(
        subscriptionId: String, userId: String, restore: Bool,
        policy: BillingConfiguration.Binding.Policy, transactionId: String?,
        environment: StoreEnvironment, now: Timestamp, on db: DatabaseConnection
    ) throws -> Decision {
        var attempt = 0
        while true {
            attempt += 1
            do {
                return try db.transaction(retries: 3, isolation: .readCommitted) { db -> Decision in
                    try decide(
                        subscriptionId: subscriptionId, userId: userId, restore: restore, policy: policy,
                        transactionId: transactionId, environment: environment, now: now, on: db)
                }
            } catch let error as DatabaseError where error.isDuplicateKey && attempt < 3 {
                continue  // two first posts raced on the primary key: the loser re-reads the winner
            }
        }
    }

    private static func decide(
        subscriptionId: String, userId: String, restore: Bool,
        policy: BillingConfiguration.Binding.Policy, transactionId: String?,
        environment: StoreEnvironment, now: Timestamp,
        on db: DatabaseConnection
    ) throws(DatabaseError) -> Decision {
        func audit(_ action: BindingAudit.Action, previous: String?) throws(DatabaseError) {
            try BindingAudit.record(
                action, subscriptionId: subscriptionId, userId: userId, previousUserId: previous, policy: policy, restore: restore,
                transactionId: transactionId, now: now, on: db)
        }
        let row = try db.queryOne("SELECT user_id FROM billing_apple_bindings WHERE original_transaction_id = \(subscriptionId) FOR UPDATE")
        guard let owner = try row?.string("user_id") else {
            try db.execute(
                """
                INSERT INTO billing_apple_bindings (original_transaction_id, user_id, source, environment, bound_at, created_at)
                VALUES (\(subscriptionId), \(userId), 'transaction', \(environment.rawValue), \(now), \(now))
                """)
            try audit(.bound, previous: nil)
            if try attachUnmatched(subscriptionId: subscriptionId, to: userId, now: now, on: db) {
                _ = try AccessProjector.refold(userId: userId, now: now, on: db)
            }
            return .bound
        }
        if owner == userId { return .alreadyOwned }
        guard policy == .restoreMoves, restore else {
            try audit(.denied, previous: owner)
            return .denied(owner: owner)
        }
        try db.execute(
            """
            UPDATE billing_apple_bindings SET user_id = \(userId), source = 'transaction', bound_at = \(now), moves = moves + 1
            WHERE original_transaction_id = \(subscriptionId)
            """)
        try audit(.moved, previous: owner)
        // Both parties locked before either's events move or fold, in one global order (SPEC §5).
        try UserLock.lockAll([owner, userId], now: now, on: db)
        // The subscription's App Store events change owner; RevenueCat's stay with whoever
        // RevenueCat named.
        try EventInbox.moveSubject(subscriptionId: subscriptionId, providers: appleProviders, from: owner, to: userId, now: now, on: db)
        _ = try attachUnmatched(subscriptionId: subscriptionId, to: userId, now: now, on: db)
        for user in [owner, userId].sorted() { _ = try AccessProjector.refold(userId: user, now: now, on: db) }
        return .moved(from: owner)
    }

    /// The subject of an App Store event, decided inside the ingestion transaction: the
    /// bound owner; else, when `appAccountToken` names a known user, that user (who is bound
    /// now); else the token as a candidate (the event waits, unmatched).
    static func resolveSubject(
        subscriptionId: String?, candidates: [String], transactionId: String?,
        environment: StoreEnvironment, policy: BillingConfiguration.Binding.Policy,
        now: Timestamp, on db: DatabaseConnection
    ) throws(DatabaseError) -> [String] {
        guard let subscriptionId else { return candidates }
        if let owner = try owner(of: subscriptionId, on: db) { return [owner] }
        guard let token = candidates.first, try UserDirectory.knownUsers([token], on: db).contains(token) else { return candidates }
        let inserted = try db.execute(
            """
            INSERT INTO billing_apple_bindings (original_transaction_id, user_id, source, environment, bound_at, created_at)
            VALUES (\(subscriptionId), \(token), 'app_account_token', \(environment.rawValue), \(now), \(now))
            ON DUPLICATE KEY UPDATE original_transaction_id = original_transaction_id
            """)
        if inserted.affectedRows == 1 {
            try BindingAudit.record(
                .bound, subscriptionId: subscriptionId, userId: token, policy: policy, transactionId: transactionId, now: now, on: db)
        }
        return try owner(of: subscriptionId, on: db).map { [$0] } ?? candidates
    }

    /// The owner, read with a shared lock (a move in progress is waited for).
    static func owner(of subscriptionId: String, on db: DatabaseConnection) throws(DatabaseError) -> String? {
        try db.queryOne("SELECT user_id FROM billing_apple_bindings WHERE original_transaction_id = \(subscriptionId) LOCK IN SHARE MODE")?
            .string("user_id")
    }

    /// Folds the subscription's unmatched App Store events into its owner, if it has one.
    /// Idempotent; run after an unmatched event committed, so that a binding created
    /// concurrently (whose own claim could not see the event yet) still gets it.
    static func claimUnmatched(subscriptionId: String, now: Timestamp, on db: DatabaseConnection) throws {
        try db.transaction(retries: 3, isolation: .readCommitted) { db in
            guard let owner = try owner(of: subscriptionId, on: db) else { return }
            try UserLock.lock(owner, now: now, on: db)
            if try attachUnmatched(subscriptionId: subscriptionId, to: owner, now: now, on: db) {
                _ = try AccessProjector.refold(userId: owner, now: now, on: db)
            }
        }
    }

    /// Returns true when some event was attached (the caller re-folds `userId`).
    private static func attachUnmatched(
        subscriptionId: String, to userId: String, now: Timestamp,
        on db: DatabaseConnection
    ) throws(DatabaseError) -> Bool {
        try EventInbox.attachUnmatched(subscriptionId: subscriptionId, providers: appleProviders, to: userId, now: now, on: db)
    }
}
