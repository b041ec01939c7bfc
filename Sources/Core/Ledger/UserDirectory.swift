/// Known users (`billing_users`) and the moment a user becomes known: his unmatched events
/// (kept with their candidate ids) are claimed and folded in.
enum UserDirectory {
    enum Source: String, Sendable { case token, `import` }

    /// Which of `ids` name known, not deleted users.
    static func knownUsers(_ ids: [String], on db: DatabaseConnection) throws(DatabaseError) -> Set<String> {
        guard !ids.isEmpty else { return [] }
        let rows = try db.query("SELECT id FROM billing_users WHERE deleted_at IS NULL AND id IN (\(list: ids.map(SQLValue.string)))")
        var result = Set<String>()
        for row in rows { result.insert(try row.string("id")) }
        return result
    }

    /// Makes `userId` known (no-op when he is) and folds in whatever was waiting for him.
    /// Returns true when the user was new. Runs its own transaction. Throws
    /// `BillingError.userDeleted` for an erased id.
    @discardableResult
    static func ensureKnown(
        _ userId: String, source: Source, createdAt: Timestamp, now: Timestamp,
        on db: DatabaseConnection
    ) throws -> Bool {
        let created = try db.transaction(retries: 3, isolation: .readCommitted) { db -> Bool in
            let result = try db.execute(
                """
                INSERT IGNORE INTO billing_users (id, created_at, first_seen_at, last_seen_at, source)
                VALUES (\(userId), \(createdAt), \(source == .token ? now : nil), \(source == .token ? now : nil), \(source.rawValue))
                """)
            // An erased id is never a user again (SPEC §19): 410 `user_deleted` on the routes.
            // Checked after the insert, under its lock: an erasure committing meanwhile is seen.
            if result.affectedRows == 1 { try ErasedUsers.refuseErased(userId, on: db) }
            if result.affectedRows == 1 { try UserLock.lock(userId, now: now, on: db) }
            return result.affectedRows == 1
        }
        try claimUnmatched(userId, now: now, on: db)
        return created
    }

    /// `ensureKnown` for a token-authenticated user, skipped with one indexed read when he
    /// already is.
    static func ensureKnownIfNeeded(_ userId: String, now: Timestamp, on db: DatabaseConnection) throws {
        if try db.queryOne("SELECT 1 AS known FROM billing_access WHERE user_id = \(userId) AND folded_at IS NOT NULL") != nil { return }
        try ensureKnown(userId, source: .token, createdAt: now, now: now, on: db)
    }

    /// Attaches the unmatched events naming `userId` to him and re-folds him, in one
    /// transaction. Idempotent: both the user's creation and a webhook that stored an
    /// unmatched event call it after their commit, so whichever commits last finds the other.
    static func claimUnmatched(_ userId: String, now: Timestamp, on db: DatabaseConnection) throws {
        try db.transaction(retries: 3, isolation: .readCommitted) { db in
            guard try knownUsers([userId], on: db).contains(userId) else { return }
            // The user's lock first: claims and folds of one user never interleave.
            try UserLock.lock(userId, now: now, on: db)
            let waiting = try db.query(
                """
                SELECT c.event_id, c.role FROM billing_event_user_candidates c
                WHERE c.candidate_id = \(userId) FOR UPDATE
                """)
            guard !waiting.isEmpty else {
                // Nothing waits: record that the claim ran (folded_at NULL marks a user whose
                // creation committed without it; see AccessSnapshot.unclaimed).
                try db.execute("UPDATE billing_access SET folded_at = \(now) WHERE user_id = \(userId) AND folded_at IS NULL")
                return
            }
            for row in waiting {
                let eventId = try row.uint64("event_id")
                let role = EventInbox.PartyRole(rawValue: try row.string("role")) ?? .subject
                try EventInbox.addParty(eventId: eventId, userId: userId, role: role, on: db)
                try db.execute(
                    """
                    UPDATE billing_events SET status = 'applied', user_id = COALESCE(user_id, \(userId)), applied_at = \(now)
                    WHERE id = \(eventId) AND status = 'unmatched'
                    """)
                if role == .subject {
                    // The subject is decided: the event's other candidate ids no longer matter.
                    try db.execute("DELETE FROM billing_event_user_candidates WHERE event_id = \(eventId) AND role = 'subject'")
                } else {
                    try db.execute("DELETE FROM billing_event_user_candidates WHERE event_id = \(eventId) AND candidate_id = \(userId)")
                }
            }
            _ = try AccessProjector.refold(userId: userId, now: now, on: db)
        }
    }
}
