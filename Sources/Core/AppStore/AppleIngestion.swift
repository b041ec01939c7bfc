/// App Store deliveries into the shared inbox and fold: `EventIngestion`'s two entry points
/// with the subscription's binding deciding the subject inside the ingestion transaction.
enum AppleIngestion {
    /// In its own transaction, with its after-commit steps (the webhook, the transaction route).
    static func ingest(
        _ delivery: AppleDelivery, policy: BillingConfiguration.Binding.Policy, now: Timestamp,
        on db: DatabaseConnection
    ) throws -> EventIngestion.Outcome {
        try EventIngestion.deliver(delivery.ingestion(policy: policy, now: now), now: now, on: db)
    }

    /// Inside the caller's open transaction (`EventIngestion.record`: a pull, a replay).
    static func record(
        _ delivery: AppleDelivery, policy: BillingConfiguration.Binding.Policy, now: Timestamp,
        on db: DatabaseConnection
    ) throws(DatabaseError) -> EventIngestion.Outcome {
        try EventIngestion.record(delivery.ingestion(policy: policy, now: now), now: now, on: db)
    }
}

extension AppleDelivery {
    /// The delivery as the ledger takes it: the subscription's binding decides the subject
    /// inside the ingestion transaction, and an event stored waiting is claimed by
    /// subscription after commit (a binding created meanwhile could not see it).
    func ingestion(policy: BillingConfiguration.Binding.Policy, now: Timestamp) -> EventIngestion.Delivery {
        let (event, candidates, transactionId) = (event, userCandidates, transaction?.transactionId)
        return EventIngestion.Delivery(
            event: event, payload: .value(payload), candidates: candidates,
            resolveCandidates: { (db) throws(DatabaseError) -> [String] in
                try AppleBinding.resolveSubject(
                    subscriptionId: event.subscriptionId, candidates: candidates, transactionId: transactionId,
                    environment: event.environment, policy: policy, now: now, on: db)
            },
            afterCommitWhenUnmatched: event.subscriptionId.map { subscription in
                { db in try AppleBinding.claimUnmatched(subscriptionId: subscription, now: now, on: db) }
            })
    }
}
