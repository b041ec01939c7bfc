/// The per-user lock (SPEC §5): the user's `billing_access` row, taken exclusively and held
/// to commit. Everything that changes what his snapshot says takes it first: a fold, a
/// claim of his unmatched events, a grant, a consumption, a binding move, his erasure.
///
/// The global lock order, which every caller keeps by going through here:
/// 1. a user's lock before any row of his events (inbox, parties, candidates), so a claim
///    and a delivery for one user queue on one row instead of crossing on two;
/// 2. several users' locks in ascending id order (`lockAll`), every one taken before any of
///    them is folded, so two multi-user events (a transfer, a binding move) cannot hold
///    each other's first lock.
/// The caller's transaction should be READ COMMITTED: after waiting for the lock it then
/// reads everything the transaction it waited for committed.
enum UserLock {
    /// Creates the access row if needed and takes its exclusive lock; returns its revision.
    /// `ON DUPLICATE KEY UPDATE` locks an existing row exclusively at once, where INSERT
    /// IGNORE + SELECT FOR UPDATE would take a shared lock first and deadlock two callers.
    @discardableResult
    static func lock(_ userId: String, now: Timestamp, on db: DatabaseConnection) throws(DatabaseError) -> UInt64 {
        guard db.isInTransaction else { throw .misuse("UserLock.lock outside a transaction: the lock would end at once") }
        try db.execute(
            """
            INSERT INTO billing_access (user_id, revision, updated_at) VALUES (\(userId), 0, \(now))
            ON DUPLICATE KEY UPDATE user_id = user_id
            """)
        guard let row = try db.queryOne("SELECT revision FROM billing_access WHERE user_id = \(userId) FOR UPDATE") else {
            throw DatabaseError.misuse("billing_access row vanished under its lock")
        }
        return try row.uint64("revision")
    }

    /// Locks every one of `userIds` in the global order (ascending id, each once).
    static func lockAll(_ userIds: [String], now: Timestamp, on db: DatabaseConnection) throws(DatabaseError) {
        for userId in order(userIds) { try lock(userId, now: now, on: db) }
    }

    /// The order in which several users are locked, and then folded.
    static func order(_ userIds: some Sequence<String>) -> [String] { Array(Set(userIds)).sorted() }
}
