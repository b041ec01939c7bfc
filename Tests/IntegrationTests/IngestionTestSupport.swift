@testable import Core

/// A delivery of one event with plain candidates (no provider hooks), through the ledger's
/// two entry points: the shape most tests ingest in.
extension EventIngestion {
    static func ingest(
        _ event: StoreEvent, payload: StoredPayload, subjectCandidates: [String], now: Timestamp,
        on db: DatabaseConnection
    ) throws -> Outcome {
        try deliver(Delivery(event: event, payload: payload, candidates: subjectCandidates), now: now, on: db)
    }

    static func record(
        _ event: StoreEvent, payload: StoredPayload, subjectCandidates: [String], now: Timestamp,
        on db: DatabaseConnection
    ) throws(DatabaseError) -> Outcome {
        try record(Delivery(event: event, payload: payload, candidates: subjectCandidates), now: now, on: db)
    }
}
