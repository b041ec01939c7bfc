/// `users.delete` as an erasure (SPEC §19); the refusal of an erased id is `ErasedUsers`.
///
/// In one audited transaction, under the user's access lock:
/// - removed: his access row and store projection, App Store bindings and Google Play
///   purchase tokens (each unbinding audited), grants, campaign memberships, offering ladder
///   stages, usage ledger entries, paywall events, active days, the pull schedules of
///   RevenueCat and of his store subscriptions, and the candidate rows of events still
///   waiting for him;
/// - re-keyed to a tombstone (`erased:` and 32 random hex digits, linked to nothing): his
///   `billing_users` row (created_at and source kept, seen times dropped), the inbox rows he
///   owns or is a party of, the binding audit and the audit log (the ledgers stay append-only
///   in what they count);
/// - scrubbed: every stored payload naming him, `PersonalData.scrub` (his ids and aliases
///   become the tombstone, `subscriber_attributes` go), the columns the fold and the
///   statistics read (kinds, products, prices, dates) untouched: subscription totals do not move;
/// - remembered: the SHA-256 of his id (`billing_erased_users`, `ErasedUsers`), so the id is refused on every
///   user route (410 `user_deleted`), by every admin method but `access.get`, never becomes a
///   user again, and never waits as an event's candidate.
enum UserErasure {
    struct Result: Sendable {
        /// The store subscriptions that were bound to the user and no longer are.
        var unboundSubscriptions: [String]
        /// Rows removed, by table (only tables that had some).
        var removed: [String: Int]
        /// Inbox rows whose payload was scrubbed.
        var scrubbedEvents: Int
        var alreadyDeleted: Bool
        var deletedAt: Timestamp?
    }

    /// Erases `userId` (see the type's documentation). Idempotent: an erased id answers
    /// `alreadyDeleted`; a user deleted before erasure existed (his row kept, `deleted_at`
    /// set) is erased now.
    static func erase(
        userId: String, actor: String, reason: String?, now: Timestamp,
        policy: BillingConfiguration.Binding.Policy, on db: DatabaseConnection
    ) throws -> Result {
        try db.transaction(retries: 3, isolation: .readCommitted) { db -> Result in
            guard let user = try db.queryOne("SELECT created_at, source FROM billing_users WHERE id = \(userId) FOR UPDATE") else {
                if let at = try ErasedUsers.erasedAt(userId, on: db) {
                    return Result(unboundSubscriptions: [], removed: [:], scrubbedEvents: 0, alreadyDeleted: true, deletedAt: at)
                }
                throw BillingError.notFound("user", ["userId": .string(userId)])
            }
            // His lock first, as every fold and claim takes it: none of them interleaves.
            _ = try UserLock.lock(userId, now: now, on: db)
            let tombstone = ErasedUsers.tombstonePrefix + Hex.encode(try SecureRandom.bytes(16))
            // Marked deleted first: the usage ledger lets its rows go only for a deleted user.
            try db.execute("UPDATE billing_users SET deleted_at = \(now) WHERE id = \(userId)")
            try db.execute(
                """
                INSERT INTO billing_users (id, created_at, first_seen_at, last_seen_at, source, deleted_at)
                VALUES (\(tombstone), \(try user.timestamp("created_at")), NULL, NULL, \(try user.string("source")), \(now))
                """)

            let subscriptions = try db.query("SELECT subscription_id FROM billing_subscriptions WHERE user_id = \(userId) ORDER BY subscription_id")
                .map { (row) throws(DatabaseError) -> String in try row.string("subscription_id") }
            let bound = try db.query("SELECT original_transaction_id FROM billing_apple_bindings WHERE user_id = \(userId) FOR UPDATE")
                .map { (row) throws(DatabaseError) -> String in try row.string("original_transaction_id") }
            let playTokens = try db.query("SELECT subscription_id FROM billing_google_purchases WHERE user_id = \(userId) FOR UPDATE")
                .map { (row) throws(DatabaseError) -> String in try row.string("subscription_id") }
            for subscription in bound + playTokens {
                try BindingAudit.record(.unbound, subscriptionId: subscription, userId: tombstone, policy: policy, now: now, on: db)
            }

            // Payloads first (the candidate rows still say which unmatched events name him).
            let scrubbed = try scrubEvents(userId: userId, tombstone: tombstone, on: db)

            var deletions: [(table: String, query: SQLQuery)] = [
                ("billing_subscriptions", "DELETE FROM billing_subscriptions WHERE user_id = \(userId)"),
                ("billing_outbox", "DELETE FROM billing_outbox WHERE user_id = \(userId)"),
                ("billing_apple_bindings", "DELETE FROM billing_apple_bindings WHERE user_id = \(userId)"),
                // His Play purchase tokens are his credentials at Google: gone with him.
                ("billing_google_purchases", "DELETE FROM billing_google_purchases WHERE user_id = \(userId)"),
                ("billing_grants", "DELETE FROM billing_grants WHERE user_id = \(userId)"),
                ("billing_campaign_members", "DELETE FROM billing_campaign_members WHERE user_id = \(userId)"),
                ("offering_ladder_stages", "DELETE FROM offering_ladder_stages WHERE user_id = \(userId)"),
                ("usage_ledger", "DELETE FROM usage_ledger WHERE user_id = \(userId)"),
                ("billing_paywall_events", "DELETE FROM billing_paywall_events WHERE user_id = \(userId)"),
                ("billing_user_days", "DELETE FROM billing_user_days WHERE user_id = \(userId)"),
                ("billing_event_user_candidates", "DELETE FROM billing_event_user_candidates WHERE candidate_id = \(userId)"),
                ("billing_reconcile_state", "DELETE FROM billing_reconcile_state WHERE provider = 'revenuecat' AND subscription_id = \(userId)"),
            ]
            for subscription in bound {
                deletions.append(
                    (
                        "billing_reconcile_state",
                        "DELETE FROM billing_reconcile_state WHERE provider = 'apple' AND subscription_id = \(subscription)"
                    ))
            }
            for subscription in playTokens {
                deletions.append(
                    (
                        "billing_reconcile_state",
                        "DELETE FROM billing_reconcile_state WHERE provider = 'google' AND subscription_id = \(subscription)"
                    ))
            }
            var removed: [String: Int] = [:]
            for deletion in deletions {
                let n = try db.execute(deletion.query).affectedRows
                if n > 0 { removed[deletion.table, default: 0] += n }
            }

            try db.execute("UPDATE billing_events SET user_id = \(tombstone) WHERE user_id = \(userId)")
            try db.execute("UPDATE billing_event_parties SET user_id = \(tombstone) WHERE user_id = \(userId)")
            // The statistics' stored states (sql/025) name the latest event's user: the
            // refresh the update trigger asked for would write the tombstone too, but not in
            // this transaction.
            try db.execute("UPDATE billing_subscription_states SET user_id = \(tombstone) WHERE user_id = \(userId)")
            // Their stored folds name him too (the latest event's user): gone, so the refresh
            // the update trigger asked for derives those subscriptions whole.
            try db.execute(
                """
                DELETE f FROM billing_subscription_folds f
                JOIN (SELECT DISTINCT environment, subscription_id FROM billing_events
                      WHERE user_id = \(tombstone) AND subscription_id IS NOT NULL) e
                  ON f.environment = e.environment AND f.subscription_id = e.subscription_id
                """)
            try db.execute("UPDATE billing_binding_audit SET user_id = \(tombstone) WHERE user_id = \(userId)")
            try db.execute("UPDATE billing_binding_audit SET previous_user_id = \(tombstone) WHERE previous_user_id = \(userId)")
            try scrubAudit(userId: userId, tombstone: tombstone, on: db)

            try db.execute("DELETE FROM billing_access WHERE user_id = \(userId)")
            try db.execute("INSERT INTO billing_erased_users (id_sha256, erased_at) VALUES (\(ErasedUsers.idHash(userId)), \(now))")
            // Fails (a foreign key) if any table still names him: nothing is left behind.
            try db.execute("DELETE FROM billing_users WHERE id = \(userId)")

            var counts = JSONObject()
            for table in removed.keys.sorted() { counts[table] = .int(Int64(removed[table]!)) }
            try AuditLog.write(
                actor: actor, action: "users.delete", targetUserId: tombstone,
                detail: [
                    "reason": JSON(reason), "unboundSubscriptions": .array(subscriptions.map(JSON.string)),
                    "removed": .object(counts), "scrubbedEvents": .int(Int64(scrubbed)),
                ],
                now: now, on: db)
            return Result(
                unboundSubscriptions: subscriptions, removed: removed, scrubbedEvents: scrubbed,
                alreadyDeleted: false, deletedAt: now)
        }
    }

    /// Rewrites the payload of every inbox row that names him (his own, those he is a party
    /// of, those waiting for him as a candidate); returns how many changed.
    private static func scrubEvents(userId: String, tombstone: String, on db: DatabaseConnection) throws -> Int {
        let rows = try db.query(
            """
            SELECT e.id, e.user_id, e.payload FROM billing_events e
            WHERE e.user_id = \(userId)
               OR e.id IN (SELECT p.event_id FROM billing_event_parties p WHERE p.user_id = \(userId))
               OR e.id IN (SELECT c.event_id FROM billing_event_user_candidates c WHERE c.candidate_id = \(userId))
            ORDER BY e.id FOR UPDATE
            """)
        var payloads: [(id: UInt64, owned: Bool, payload: JSON?)] = []
        for row in rows {
            let text = try row.string("payload")
            payloads.append(
                (
                    try row.uint64("id"), try row.optionalString("user_id") == userId,
                    try? JSON.parse(Array(text.utf8), limits: PersonalData.storedLimits)
                ))
        }
        // His identities: the id, and every alias his own events give him (RevenueCat's
        // aliases and original ids, anonymous ones included).
        var identities: Set<String> = [userId]
        for entry in payloads where entry.owned {
            // (Another erased user's tombstone, in a transfer between the two, is no id of his.)
            if let payload = entry.payload {
                identities.formUnion(PersonalData.aliases(in: payload).filter { !$0.hasPrefix(ErasedUsers.tombstonePrefix) && !$0.isEmpty })
            }
        }
        var changed = 0
        for entry in payloads {
            guard let payload = entry.payload else {
                // Unreadable (never written so by this server): nothing of it is kept.
                try db.execute("UPDATE billing_events SET payload = '{}' WHERE id = \(entry.id)")
                changed += 1
                continue
            }
            let clean = PersonalData.scrub(payload, identities: identities, tombstone: tombstone)
            guard clean != payload else { continue }
            try db.execute("UPDATE billing_events SET payload = \(clean) WHERE id = \(entry.id)")
            changed += 1
        }
        return changed
    }

    /// The audit log's rows about him get the tombstone as their target, and his id is
    /// replaced in any row's detail (e.g. a users.import list).
    private static func scrubAudit(userId: String, tombstone: String, on db: DatabaseConnection) throws {
        try db.execute("UPDATE audit_log SET target_user_id = \(tombstone) WHERE target_user_id = \(userId)")
        var needle = "%"
        for c in userId {
            if c == "\\" || c == "%" || c == "_" { needle.append("\\") }
            needle.append(c)
        }
        needle.append("%")
        let rows = try db.query("SELECT id, detail FROM audit_log WHERE detail LIKE \(needle) FOR UPDATE")
        for row in rows {
            let id = try row.uint64("id")
            guard let text = try row.optionalString("detail"),
                let detail = try? JSON.parse(Array(text.utf8), limits: PersonalData.storedLimits)
            else { continue }
            let clean = PersonalData.scrub(detail, identities: [userId], tombstone: tombstone)
            if clean != detail { try db.execute("UPDATE audit_log SET detail = \(clean) WHERE id = \(id)") }
        }
    }
}
