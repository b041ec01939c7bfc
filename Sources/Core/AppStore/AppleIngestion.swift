/// App Store deliveries into the shared inbox and fold: `EventIngestion.ingest` with the
/// subscription's binding deciding the subject inside the ingestion transaction.
public enum AppleIngestion {
    public static func ingest(_ delivery: AppleDelivery, policy: BillingConfiguration.Binding.Policy, now: Timestamp,
                              on db: DatabaseConnection) throws -> EventIngestion.Outcome {
        let event = delivery.event
        let outcome = try EventIngestion.ingest(
            event, payload: delivery.payload, subjectCandidates: delivery.userCandidates, now: now, on: db,
            resolveSubject: { (db) throws(DatabaseError) -> [String] in
                try AppleBinding.resolveSubject(subscriptionId: event.subscriptionId, candidates: delivery.userCandidates,
                                                transactionId: delivery.transaction?.transactionId,
                                                environment: event.environment, policy: policy, now: now, on: db)
            })
        // Stored unmatched: a binding created meanwhile could not see it; claim it now.
        if outcome.status == .unmatched, let subscription = event.subscriptionId {
            try AppleBinding.claimUnmatched(subscriptionId: subscription, now: now, on: db)
        }
        return outcome
    }
}
