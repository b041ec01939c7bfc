/// App Store deliveries into the shared inbox and fold: `EventIngestion` with the
/// subscription's binding deciding the subject inside the ingestion transaction.
enum AppleIngestion {
    /// In its own transaction, with its after-commit steps (the webhook, the transaction route).
    static func ingest(
        _ delivery: AppleDelivery, policy: BillingConfiguration.Binding.Policy, now: Timestamp,
        on db: DatabaseConnection
    ) throws -> EventIngestion.Outcome {
        try EventIngestion.commit(on: db) { db in try record(delivery, policy: policy, now: now, on: db) }
    }

    /// Inside the caller's open transaction (`EventIngestion.record`); the caller runs
    /// `finish` on the result after its commit.
    static func record(
        _ delivery: AppleDelivery, policy: BillingConfiguration.Binding.Policy, now: Timestamp,
        on db: DatabaseConnection
    ) throws(DatabaseError) -> PendingIngestion {
        let event = delivery.event
        var pending = try EventIngestion.record(
            event, payload: .value(delivery.payload), subjectCandidates: delivery.userCandidates, now: now, on: db,
            resolveSubject: { (db) throws(DatabaseError) -> [String] in
                try AppleBinding.resolveSubject(
                    subscriptionId: event.subscriptionId, candidates: delivery.userCandidates,
                    transactionId: delivery.transaction?.transactionId,
                    environment: event.environment, policy: policy, now: now, on: db)
            })
        // Stored unmatched: a binding created meanwhile could not see it; claim it after commit.
        if pending.outcome.status == .unmatched, let subscription = event.subscriptionId {
            pending.afterCommit { db in try AppleBinding.claimUnmatched(subscriptionId: subscription, now: now, on: db) }
        }
        return pending
    }
}
