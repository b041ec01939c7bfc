/// `users.import` and `users.delete`.
enum UserAdmin {
    struct ImportedUser: Sendable, Equatable {
        var id: String
        var createdAt: Timestamp

        init(id: String, createdAt: Timestamp) {
            self.id = id
            self.createdAt = createdAt
        }
    }

    struct ImportResult: Sendable, Equatable {
        var inserted: Int
        var existing: Int
        /// Users whose waiting (unmatched) store events were folded in.
        var claimed: [String]
    }

    /// Rows per INSERT statement: well under the 65,535 placeholders of a statement.
    static let chunkSize = 1000

    /// Inserts the users not known yet (an existing id keeps its row: idempotent), creates
    /// their access rows and audits the call, in one transaction per call; then folds in
    /// the store events that were waiting for any of them.
    static func importUsers(
        _ users: [ImportedUser], actor: String, now: Timestamp,
        on db: DatabaseConnection
    ) throws -> ImportResult {
        var seen = Set<String>()
        let unique = users.filter { seen.insert($0.id).inserted }
        let inserted = try db.transaction(retries: 3, isolation: .readCommitted) { db -> Int in
            var inserted = 0
            for chunk in unique.chunks(of: chunkSize) {
                var query: SQLQuery = "INSERT IGNORE INTO billing_users (id, created_at, source) VALUES "
                for (index, user) in chunk.enumerated() {
                    query.append(index == 0 ? "(\(user.id), \(user.createdAt), 'import')" : ", (\(user.id), \(user.createdAt), 'import')")
                }
                inserted += try db.execute(query).affectedRows
                // An erased id never becomes a user again (SPEC §19): the whole call is refused
                // (checked after the insert, under its locks: an erasure committing meanwhile is seen).
                if let erased = try ErasedUsers.erased(chunk.map(\.id), on: db).min() { throw BillingError.userDeleted(erased) }
                let ids = chunk.map { SQLValue.string($0.id) }
                try db.execute(
                    """
                    INSERT IGNORE INTO billing_access (user_id, revision, updated_at)
                    SELECT u.id, 0, \(now) FROM billing_users u WHERE u.id IN (\(list: ids))
                    """)
            }
            try AuditLog.write(
                actor: actor, action: "users.import",
                detail: [
                    "received": .int(Int64(users.count)), "inserted": .int(Int64(inserted)),
                    "existing": .int(Int64(unique.count - inserted)),
                ],
                now: now, on: db)
            return inserted
        }
        // Users with unmatched events waiting for them: fold those in now (idempotent).
        var waiting: [String] = []
        for chunk in unique.chunks(of: chunkSize) {
            let ids = chunk.map { SQLValue.string($0.id) }
            for row in try db.query("SELECT DISTINCT candidate_id FROM billing_event_user_candidates WHERE candidate_id IN (\(list: ids))") {
                waiting.append(try row.string("candidate_id"))
            }
        }
        for userId in waiting.sorted() { try UserDirectory.claimUnmatched(userId, now: now, on: db) }
        return ImportResult(inserted: inserted, existing: unique.count - inserted, claimed: waiting.sorted())
    }

    /// `users.delete`: an erasure (`UserErasure`, SPEC §19).
    static func delete(
        userId: String, actor: String, reason: String?, now: Timestamp,
        policy: BillingConfiguration.Binding.Policy = .deny,
        on db: DatabaseConnection
    ) throws -> UserErasure.Result {
        try UserErasure.erase(userId: userId, actor: actor, reason: reason, now: now, policy: policy, on: db)
    }
}
