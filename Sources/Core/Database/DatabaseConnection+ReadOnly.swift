extension DatabaseConnection {
    /// Runs `body` in `START TRANSACTION WITH CONSISTENT SNAPSHOT, READ ONLY` at repeatable
    /// read: every plain read inside sees the same committed state, so a response built
    /// from several tables (access row, grants, campaigns) never straddles a commit, and a
    /// write inside fails instead of slipping through.
    func readOnlySnapshot<T>(_ body: (DatabaseConnection) throws -> T) throws -> T {
        let value = try inTransaction(begin: "START TRANSACTION WITH CONSISTENT SNAPSHOT, READ ONLY", isolation: .repeatableRead, body)
        try runAfterCommitSteps()
        return value
    }
}
