@testable import Core

/// The quota service as the routes call it, with a process's services: plans and the
/// enforcement flag read as the route reads them.
extension QuotaService {
    static func consume(
        userId: String, meter: String, amount: Int64, idempotencyKey: String, now: Timestamp,
        services: BillingServices, on db: DatabaseConnection
    ) throws -> Consumption {
        try AccessSnapshot.consume(
            userId: userId, meter: meter, amount: amount, idempotencyKey: idempotencyKey, now: now,
            plans: try services.plans.plans(on: db), enforcement: services.flags.current(on: db).enforcement, on: db)
    }

    static func status(for snapshot: AccessSnapshot, services: BillingServices, on db: DatabaseConnection) throws -> QuotaStatus {
        let plan = plan(for: snapshot.quotaSubject, plans: try services.plans.plans(on: db))
        return plan.status(
            used: try usage(userId: snapshot.userId, windows: plan.windows, on: db), enforcement: services.flags.current(on: db).enforcement)
    }
}
