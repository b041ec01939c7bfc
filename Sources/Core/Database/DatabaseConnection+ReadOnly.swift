extension DatabaseConnection {
    /// Runs `body` in `START TRANSACTION WITH CONSISTENT SNAPSHOT, READ ONLY` at repeatable
    /// read: every plain read inside sees the same committed state, so a response built
    /// from several tables (access row, grants, campaigns) never straddles a commit, and a
    /// write inside fails instead of slipping through.
    func readOnlySnapshot<T>(_ body: (DatabaseConnection) throws -> T) throws -> T {
        // No SET TRANSACTION needed: the session stays at InnoDB's default (repeatable read);
        // `transaction(isolation:)` sets its level for one transaction only, right before it.
        try inTransaction(begin: "START TRANSACTION WITH CONSISTENT SNAPSHOT, READ ONLY", body)
    }
}
