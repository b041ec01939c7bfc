/// `audit_log`: every admin mutation leaves one row (or one per user it touched), written in
/// the same transaction as the change itself, so an audited change is a committed one.
enum AuditLog {
    static func write(
        actor: String, action: String, targetUserId: String? = nil, campaign: String? = nil,
        detail: JSON, now: Timestamp, on db: DatabaseConnection
    ) throws(DatabaseError) {
        try db.execute(
            """
            INSERT INTO audit_log (actor, action, target_user_id, campaign, detail, created_at)
            VALUES (\(actor), \(action), \(targetUserId), \(campaign), \(detail), \(now))
            """)
    }

    /// One audit entry as listings return it.
    static func entryJSON(_ row: SQLRow) throws(DatabaseError) -> JSON {
        [
            "id": .int(Int64(try row.uint64("id"))),
            "actor": .string(try row.string("actor")),
            "peerUid": row["peer_uid"].isNull ? .null : .int(try row.int64("peer_uid")),
            "peerUser": JSON(try row.optionalString("peer_user")),
            "action": .string(try row.string("action")),
            "userId": JSON(try row.optionalString("target_user_id")),
            "campaign": JSON(try row.optionalString("campaign")),
            "detail": try row.optionalJSON("detail") ?? .null,
            "createdAt": .string(try row.timestamp("created_at").iso8601),
        ]
    }
}
