import Synchronization

/// A published contract with its number and the instant it took effect.
struct PublishedPlan: Sendable, Equatable {
    var version: Int
    var contract: PlanContract
    var publishedAt: Timestamp
}

/// The plan versions, cached per process for at most `ttlMilliseconds` (they only ever
/// gain rows, so a short TTL is all the invalidation needed across worker processes).
final class PlanCatalog: Sendable {
    private struct Cache {
        var loadedAt: Int64
        var plans: [PublishedPlan]
    }

    private let cache = Mutex<Cache?>(nil)
    let ttlMilliseconds: Int64

    init(ttlMilliseconds: Int64 = 1000) { self.ttlMilliseconds = ttlMilliseconds }

    /// All versions, oldest first (at least version 1, shipped by migration 006).
    func plans(on db: DatabaseConnection) throws -> [PublishedPlan] {
        let now = monotonicMilliseconds()
        if let cached = cache.withLock({ $0 }), now - cached.loadedAt < ttlMilliseconds { return cached.plans }
        var plans: [PublishedPlan] = []
        for row in try db.query("SELECT version, contract, published_at FROM plan_versions ORDER BY version") {
            plans.append(PublishedPlan(version: try row.int("version"), contract: try PlanContract(json: try row.json("contract")),
                                       publishedAt: try row.timestamp("published_at")))
        }
        guard !plans.isEmpty else { throw DatabaseError.misuse("plan_versions is empty: migration 006 not applied") }
        cache.withLock { $0 = Cache(loadedAt: now, plans: plans) }
        return plans
    }

    func invalidate() { cache.withLock { $0 = nil } }

    /// The version in effect at `instant`: the newest published at or before it (the
    /// oldest when `instant` predates them all). Windows use the version of their start,
    /// so a new version applies to new windows and never rewrites a running one.
    static func plan(in plans: [PublishedPlan], at instant: Timestamp) -> PublishedPlan {
        plans.last { $0.publishedAt <= instant } ?? plans[0]
    }
}

