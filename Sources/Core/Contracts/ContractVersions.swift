import Synchronization

/// A contract kept as immutable, numbered versions in its own table (`plan_versions`,
/// `offering_versions`: `version`, `contract` JSON, `published_at`, `published_by`; triggers
/// refuse UPDATE and DELETE), the newest published at or before an instant being in force.
protocol VersionedContract: Sendable, Equatable {
    associatedtype ValidationError: Error & CustomStringConvertible
    /// The table of versions (a constant, never user input).
    static var versionsTable: StaticString { get }
    /// The audit action of a publication, e.g. `plans.publish`.
    static var publishAction: String { get }
    init(json: JSON) throws(ValidationError)
    var json: JSON { get }
}

/// A published version with its number and the instant it took effect.
struct PublishedContract<Contract: VersionedContract>: Sendable, Equatable {
    var version: Int
    var contract: Contract
    var publishedAt: Timestamp
}

/// The versions of one contract, cached per process for at most `ttlMilliseconds` (they
/// only ever gain rows, so a short TTL is all the invalidation needed across processes).
final class ContractVersions<Contract: VersionedContract>: Sendable {
    private struct Cache {
        var loadedAt: Int64
        var versions: [PublishedContract<Contract>]
    }

    private let cache = Mutex<Cache?>(nil)
    let ttlMilliseconds: Int64

    init(ttlMilliseconds: Int64 = 1000) { self.ttlMilliseconds = ttlMilliseconds }

    private static var table: String { "\(Contract.versionsTable)" }

    /// All versions, oldest first (at least version 1, shipped by its migration).
    func versions(on db: DatabaseConnection) throws -> [PublishedContract<Contract>] {
        let now = monotonicMilliseconds()
        if let cached = cache.withLock({ $0 }), now - cached.loadedAt < ttlMilliseconds { return cached.versions }
        var versions: [PublishedContract<Contract>] = []
        for row in try db.query("SELECT version, contract, published_at FROM \(unsafeRaw: Self.table) ORDER BY version") {
            versions.append(
                PublishedContract(
                    version: try row.int("version"), contract: try Contract(json: try row.json("contract")),
                    publishedAt: try row.timestamp("published_at")))
        }
        guard !versions.isEmpty else { throw DatabaseError.misuse("\(Self.table) is empty: its migration is not applied") }
        cache.withLock { $0 = Cache(loadedAt: now, versions: versions) }
        return versions
    }

    func invalidate() { cache.withLock { $0 = nil } }

    /// The version in effect at `instant`: the newest published at or before it (the
    /// oldest when `instant` predates them all).
    static func version(in versions: [PublishedContract<Contract>], at instant: Timestamp) -> PublishedContract<Contract> {
        versions.last { $0.publishedAt <= instant } ?? versions[0]
    }

    /// Inserts the next version, effective at `effectiveAt`, and its audit row, in one
    /// transaction; returns its number.
    func publish(
        _ contract: Contract, effectiveAt: Timestamp, actor: String, now: Timestamp,
        on db: DatabaseConnection
    ) throws -> Int {
        let version = try db.transaction(retries: 3) { db -> Int in
            let next = (try db.queryOne("SELECT COALESCE(MAX(version), 0) + 1 AS next FROM \(unsafeRaw: Self.table) FOR UPDATE")?.int("next")) ?? 1
            try db.execute(
                """
                INSERT INTO \(unsafeRaw: Self.table) (version, contract, published_at, published_by)
                VALUES (\(next), \(contract.json), \(effectiveAt), \(actor))
                """)
            try AuditLog.write(
                actor: actor, action: Contract.publishAction,
                detail: ["version": .int(Int64(next)), "effectiveAt": .string(effectiveAt.iso8601)], now: now, on: db)
            return next
        }
        invalidate()
        return version
    }
}

extension RPCMethodRegistry where Context: RPCContextProtocol {
    /// `<name>.list` and `<name>.publish` of a versioned contract: every version and the
    /// one in force; publishing validates, takes effect at `effectiveAt` (default now, never
    /// in the past) and is audited.
    mutating func registerVersionedContractMethods<Contract: VersionedContract>(
        _ name: String, what: String, versions catalog: ContractVersions<Contract>
    ) {
        register(
            "\(name).list", summary: "Every published \(what), oldest first, and the version in force now",
            params: "none"
        ) { request, context in
            try request.params.expectOnly()
            let db = try context.requireDatabase()
            catalog.invalidate()
            let all = try catalog.versions(on: db)
            let now = context.clock.now()
            return [
                "current": .int(Int64(ContractVersions<Contract>.version(in: all, at: now).version)),
                "versions": .array(
                    all.map { published in
                        [
                            "version": .int(Int64(published.version)), "publishedAt": .string(published.publishedAt.iso8601),
                            "contract": published.contract.json,
                        ]
                    }),
            ]
        }
        register(
            "\(name).publish",
            summary: "Publish a new immutable \(what) (validated), in force from effectiveAt; audited",
            params: "{contract: object, actor: string, effectiveAt?: ISO-8601 (default now, never in the past)}"
        ) { request, context in
            try request.params.expectOnly("contract", "actor", "effectiveAt")
            let actor = try request.params.requireString("actor", maxLength: 128)
            let requestedEffectiveAt = try request.params.optionalTimestamp("effectiveAt")
            let contractJSON = JSON.object(try request.params.requireObject("contract"))
            let contract: Contract
            do {
                contract = try Contract(json: contractJSON)
            } catch {
                let problems = (error as? any ContractProblems)?.problems ?? ["\(error)"]
                throw RPCError(
                    code: RPCError.Code.invalidParams, message: "Invalid params",
                    data: ["field": "contract", "problems": .array(problems.map(JSON.string))])
            }
            let now = context.clock.now()
            let effectiveAt = requestedEffectiveAt ?? now
            guard effectiveAt >= now.adding(seconds: -1) else {
                throw RPCError.invalidParams("effectiveAt must not be in the past: what is in force stays as it was")
            }
            let version = try catalog.publish(
                contract, effectiveAt: effectiveAt, actor: actor, now: now,
                on: try context.requireDatabase())
            return ["version": .int(Int64(version)), "effectiveAt": .string(effectiveAt.iso8601)]
        }
    }
}

/// A validation error listing every problem with its path.
protocol ContractProblems {
    var problems: [String] { get }
}
