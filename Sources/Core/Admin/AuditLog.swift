/// `audit_log`: who changed what, for every operator mutation (SPEC §8).
public enum AuditLog {
    /// Records one mutation inside the caller's transaction, so the audit and the change
    /// commit together.
    public static func record(actor: String, action: String, targetUserId: String?, detail: JSON, at: Timestamp,
                              on db: DatabaseConnection) throws(DatabaseError) {
        try db.execute("""
            INSERT INTO audit_log (actor, action, target_user_id, detail, created_at)
            VALUES (\(actor), \(action), \(targetUserId), \(detail), \(at))
            """)
    }
}
