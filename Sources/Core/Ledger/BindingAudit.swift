/// `billing_binding_audit`: every decision on who owns a store subscription, append-only
/// (SPEC §5 "Binding"): an App Store `originalTransactionId` (`AppleBinding`) or a Google Play
/// purchase token's `gp:` id (`GooglePlayBinding`), in the column `original_transaction_id`.
enum BindingAudit {
    enum Action: String, Sendable {
        /// The first owner.
        case bound
        /// An explicit restore moved it to the caller (`restore_moves`).
        case moved
        /// Another user owns it and the policy refused the caller (the route answers 409).
        case denied
        /// Its owner was erased (`users.delete`).
        case unbound
    }

    /// One decision, inside the caller's transaction.
    static func record(
        _ action: Action, subscriptionId: String, userId: String, previousUserId: String? = nil,
        policy: BillingConfiguration.Binding.Policy, restore: Bool = false, transactionId: String? = nil,
        now: Timestamp, on db: DatabaseConnection
    ) throws(DatabaseError) {
        try db.execute(
            """
            INSERT INTO billing_binding_audit (original_transaction_id, action, user_id, previous_user_id, policy, restore,
              transaction_id, created_at)
            VALUES (\(subscriptionId), \(action.rawValue), \(userId), \(previousUserId), \(policy.rawValue), \(restore),
              \(transactionId), \(now))
            """)
    }
}
