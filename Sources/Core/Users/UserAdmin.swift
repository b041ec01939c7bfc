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
    static func importUsers(_ users: [ImportedUser], actor: String, now: Timestamp,
                                   on db: DatabaseConnection) throws -> ImportResult {
        var seen = Set<String>()
        let unique = users.filter { seen.insert($0.id).inserted }
        let inserted = try db.transaction(retries: 3, isolation: .readCommitted) { db -> Int in
            var inserted = 0
            var start = 0
            while start < unique.count {
                let chunk = unique[start..<min(start + chunkSize, unique.count)]
                var query: SQLQuery = "INSERT IGNORE INTO billing_users (id, created_at, source) VALUES "
                for (index, user) in chunk.enumerated() {
                    query.append(index == 0 ? "(\(user.id), \(user.createdAt), 'import')" : ", (\(user.id), \(user.createdAt), 'import')")
                }
                inserted += try db.execute(query).affectedRows
                let ids = chunk.map { SQLValue.string($0.id) }
                try db.execute("""
                    INSERT IGNORE INTO billing_access (user_id, revision, updated_at)
                    SELECT u.id, 0, \(now) FROM billing_users u WHERE u.id IN (\(list: ids))
                    """)
                start += chunkSize
            }
            try AuditLog.write(actor: actor, action: "users.import",
                               detail: ["received": .int(Int64(users.count)), "inserted": .int(Int64(inserted)),
                                        "existing": .int(Int64(unique.count - inserted))],
                               now: now, on: db)
            return inserted
        }
        // Users with unmatched events waiting for them: fold those in now (idempotent).
        var waiting: [String] = []
        var start = 0
        while start < unique.count {
            let ids = unique[start..<min(start + chunkSize, unique.count)].map { SQLValue.string($0.id) }
            for row in try db.query("SELECT DISTINCT candidate_id FROM billing_event_user_candidates WHERE candidate_id IN (\(list: ids))") {
                waiting.append(try row.string("candidate_id"))
            }
            start += chunkSize
        }
        for userId in waiting.sorted() { try UserDirectory.claimUnmatched(userId, now: now, on: db) }
        return ImportResult(inserted: inserted, existing: unique.count - inserted, claimed: waiting.sorted())
    }

    struct DeleteResult: Sendable {
        /// The store subscriptions that were bound to the user and no longer are.
        var unboundSubscriptions: [String]
        /// Operator sources left exactly as they were (reported, never revoked silently).
        var grantsUntouched: [Grant]
        var campaignsUntouched: [String]
        var alreadyDeleted: Bool
    }

    /// Marks the user deleted and unbinds his store subscriptions: their projection rows
    /// go (the inbox keeps every event), and later events for them no longer match him.
    /// Grants and campaign memberships are not revoked: the answer and the audit list them,
    /// so an operator who wants them ended says so with grants.revoke.
    static func delete(userId: String, actor: String, reason: String?, now: Timestamp,
                              policy: BillingConfiguration.Binding.Policy = .deny,
                              on db: DatabaseConnection) throws -> DeleteResult {
        try db.transaction(retries: 3, isolation: .readCommitted) { db -> DeleteResult in
            guard let user = try db.queryOne("SELECT deleted_at FROM billing_users WHERE id = \(userId) FOR UPDATE") else {
                throw BillingError.notFound("user", ["userId": .string(userId)])
            }
            let grants = try GrantStore.list(userId: userId, on: db).filter { $0.status(at: now) == .active || $0.status(at: now) == .scheduled }
            let campaigns = try db.query("SELECT campaign FROM billing_campaign_members WHERE user_id = \(userId) ORDER BY campaign")
                .map { (row) throws(DatabaseError) -> String in try row.string("campaign") }
            if try user.optionalTimestamp("deleted_at") != nil {
                return DeleteResult(unboundSubscriptions: [], grantsUntouched: grants, campaignsUntouched: campaigns, alreadyDeleted: true)
            }
            try AccessProjector.lockAccessRow(userId: userId, now: now, on: db)
            let subscriptions = try db.query("SELECT subscription_id FROM billing_subscriptions WHERE user_id = \(userId) ORDER BY subscription_id")
                .map { (row) throws(DatabaseError) -> String in try row.string("subscription_id") }
            try db.execute("UPDATE billing_users SET deleted_at = \(now) WHERE id = \(userId)")
            try db.execute("DELETE FROM billing_subscriptions WHERE user_id = \(userId)")
            // App Store subscriptions he owned are free to be bound again (audited per subscription).
            let bindings = try db.query("SELECT original_transaction_id FROM billing_apple_bindings WHERE user_id = \(userId) FOR UPDATE")
            for binding in bindings {
                let subscription = try binding.string("original_transaction_id")
                try db.execute("""
                    INSERT INTO billing_binding_audit (original_transaction_id, action, user_id, policy, created_at)
                    VALUES (\(subscription), 'unbound', \(userId), \(policy.rawValue), \(now))
                    """)
            }
            try db.execute("DELETE FROM billing_apple_bindings WHERE user_id = \(userId)")
            try db.execute("""
                UPDATE billing_access SET revision = revision + 1, tier = 'free', phase = 'none', subscription_id = NULL,
                  product_id = NULL, expires_at = NULL, will_renew = 0, updated_at = \(now)
                WHERE user_id = \(userId)
                """)
            try AuditLog.write(actor: actor, action: "users.delete", targetUserId: userId,
                               detail: ["reason": JSON(reason), "unboundSubscriptions": .array(subscriptions.map(JSON.string)),
                                        "grantsUntouched": .array(grants.map { .int(Int64($0.id)) }),
                                        "campaignsUntouched": .array(campaigns.map(JSON.string))],
                               now: now, on: db)
            return DeleteResult(unboundSubscriptions: subscriptions, grantsUntouched: grants, campaignsUntouched: campaigns,
                                alreadyDeleted: false)
        }
    }
}
