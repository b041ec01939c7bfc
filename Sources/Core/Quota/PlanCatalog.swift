/// The plan contracts (`plan_versions`), cached per process (`ContractVersions`).
typealias PlanCatalog = ContractVersions<PlanContract>

/// A published plan contract with its number and the instant it took effect.
typealias PublishedPlan = PublishedContract<PlanContract>

extension PlanContract: VersionedContract {
    static var versionsTable: StaticString { "plan_versions" }
    static var publishAction: String { "plans.publish" }
}

extension PlanContractError: ContractProblems {}

extension ContractVersions where Contract == PlanContract {
    /// All plan versions, oldest first (at least version 1, shipped by migration 006).
    func plans(on db: DatabaseConnection) throws -> [PublishedPlan] { try versions(on: db) }

    /// The version in effect at `instant`. Windows use the version of their start, so a new
    /// version applies to new windows and never rewrites a running one.
    static func plan(in plans: [PublishedPlan], at instant: Timestamp) -> PublishedPlan {
        version(in: plans, at: instant)
    }
}
