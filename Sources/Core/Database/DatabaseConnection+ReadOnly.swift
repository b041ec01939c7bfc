extension DatabaseConnection {
    /// Runs `body` in `START TRANSACTION WITH CONSISTENT SNAPSHOT, READ ONLY` at repeatable
    /// read: every plain read inside sees the same committed state, so a response built
    /// from several tables (access row, grants, campaigns) never straddles a commit, and a
    /// write inside fails instead of slipping through.
    public func readOnlySnapshot<T>(_ body: (DatabaseConnection) throws -> T) throws -> T {
        guard transactionGeneration == nil else { throw DatabaseError.misuse("nested transaction") }
        // No SET TRANSACTION needed: the session stays at InnoDB's default (repeatable read);
        // `transaction(isolation:)` sets its level for one transaction only, right before it.
        try execute("START TRANSACTION WITH CONSISTENT SNAPSHOT, READ ONLY")
        let generation = currentGeneration
        transactionGeneration = generation
        defer { transactionGeneration = nil }
        do {
            let value = try body(self)
            try execute("COMMIT")
            return value
        } catch {
            if isSession(generation) {
                do { try execute("ROLLBACK") } catch { close() }
            }
            throw error
        }
    }
}
