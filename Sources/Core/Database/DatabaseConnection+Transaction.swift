import Glibc

/// The isolation of a transaction. Repeatable read (InnoDB's default, and ours when none
/// is asked for): one consistent snapshot for all plain reads of the transaction. Read
/// committed lets each statement see what committed before it, which a transaction that
/// serializes on a row lock and then reads (the per-user fold) needs, so it sees the events
/// of the transaction it waited for.
///
/// Set per session (`SET SESSION TRANSACTION ISOLATION LEVEL`) and only when it changes:
/// a worker thread runs long series of transactions of one kind, and a per-transaction
/// `SET TRANSACTION` was one database round trip of every ingestion (docs/performance.md).
enum IsolationLevel: Sendable, Equatable {
    case readCommitted, repeatableRead

    var sessionStatement: SQLQuery {
        switch self {
        case .readCommitted: return "SET SESSION TRANSACTION ISOLATION LEVEL READ COMMITTED"
        case .repeatableRead: return "SET SESSION TRANSACTION ISOLATION LEVEL REPEATABLE READ"
        }
    }
}

extension DatabaseConnection {
    /// Runs `body` between START TRANSACTION and COMMIT; any error thrown by `body` or by
    /// COMMIT rolls back and is rethrown. Transactions do not nest (a nested call throws
    /// `.misuse`). If the connection is lost inside, the server has already rolled back and
    /// the error is `.unavailable`.
    func transaction<T>(_ body: (DatabaseConnection) throws -> T) throws -> T {
        try transaction(retries: 0, body)
    }

    /// The one place that retries: like `transaction(_:)`, but when the transaction fails
    /// with a deadlock (1213) or a lock wait timeout (1205) it is rolled back and run again,
    /// up to `retries` more times, after a short jittered backoff. `body` therefore must be
    /// re-runnable: it must not have effects outside the database (no HTTP calls, no
    /// counters) and must read what it needs inside the transaction.
    func transaction<T>(
        retries: Int, isolation: IsolationLevel? = nil,
        _ body: (DatabaseConnection) throws -> T
    ) throws -> T {
        var attempt = 0
        let value: T
        while true {
            attempt += 1
            do {
                value = try inTransaction(begin: "START TRANSACTION", isolation: isolation ?? .repeatableRead, body)
                break
            } catch let error as DatabaseError where error.isDeadlockOrLockWait && attempt <= retries {
                onRetry(error)
                Self.backoff(attempt: attempt)
            }
        }
        // Committed: a step's failure (a deadlock included) must not run the body again.
        try runAfterCommitSteps()
        return value
    }

    /// Registers `step` to run once the open transaction has committed, outside it (a step
    /// may open transactions of its own): claims a concurrent transaction could not see
    /// before the commit, and next the outbox's wake-up. Steps run in the order registered,
    /// after the whole transaction (retries included) returned; a rolled-back attempt's
    /// steps go with it, and a retried body registers them again. A step that throws makes
    /// the transaction's call throw, its effects committed: the steps must be idempotent,
    /// since a caller that retries (a provider re-delivering) runs them again.
    func afterCommit(_ step: @escaping (DatabaseConnection) throws -> Void) throws(DatabaseError) {
        guard isInTransaction else { throw .misuse("afterCommit outside a transaction") }
        afterCommitSteps.append(step)
    }

    /// Registers `step` to run inside the open transaction just before its COMMIT, once per
    /// `key` however often it is registered (a user whose access changed twice in one
    /// transaction is announced once, as committed): the outbox row of a change, written
    /// after everything the transaction changed. Steps run in the order first registered; a
    /// step may register more. One that throws rolls the transaction back.
    func beforeCommit(key: String, _ step: @escaping (DatabaseConnection) throws -> Void) throws(DatabaseError) {
        guard isInTransaction else { throw .misuse("beforeCommit outside a transaction") }
        guard beforeCommitKeys.insert(key).inserted else { return }
        beforeCommitSteps.append(step)
    }

    /// What the open transaction keeps under `key`, made by `make` on first use and dropped
    /// with the transaction (committed or not): what a `beforeCommit` step gathers along the
    /// transaction to write once (the outbox's rows, in one statement).
    func transactionLocal<Value: AnyObject>(_ key: String, _ make: () -> Value) throws(DatabaseError) -> Value {
        guard isInTransaction else { throw .misuse("transactionLocal outside a transaction") }
        if let value = transactionLocals[key] as? Value { return value }
        let value = make()
        transactionLocals[key] = value
        return value
    }

    /// Runs what the open transaction registered to run before its COMMIT.
    private func runBeforeCommitSteps() throws {
        var next = 0
        while next < beforeCommitSteps.count {
            let step = beforeCommitSteps[next]
            next += 1
            try step(self)
        }
    }

    /// Runs and clears what the transaction that just committed registered.
    func runAfterCommitSteps() throws {
        guard !afterCommitSteps.isEmpty else { return }
        let steps = afterCommitSteps
        afterCommitSteps = []
        for step in steps { try step(self) }
    }

    /// Whether a `transaction` is open on this connection (for code that must run inside
    /// its caller's transaction, or outside any).
    var isInTransaction: Bool { transactionGeneration != nil }

    /// `begin` at `isolation`, then `body`, then COMMIT; ROLLBACK (quietly) on any error.
    /// The one place a transaction is opened and closed (read-write or read-only snapshot).
    func inTransaction<T>(
        begin: SQLQuery, isolation: IsolationLevel = .repeatableRead,
        _ body: (DatabaseConnection) throws -> T
    ) throws -> T {
        guard transactionGeneration == nil else {
            throw DatabaseError.misuse("nested transaction")
        }
        if sessionIsolation.map({ !isSession($0.generation) || $0.level != isolation }) ?? true {
            try execute(isolation.sessionStatement)
            sessionIsolation = (currentGeneration, isolation)
        }
        try execute(begin)
        transactionGeneration = currentGeneration
        defer {
            transactionGeneration = nil
            beforeCommitSteps = []
            beforeCommitKeys = []
            transactionLocals = [:]
        }
        do {
            let value = try body(self)
            try runBeforeCommitSteps()
            try executeEndingTransaction("COMMIT")
            return value
        } catch {
            afterCommitSteps = []
            rollbackQuietly()
            throw error
        }
    }

    /// Rolls back if the transaction's session is still open; a lost session was rolled back
    /// by the server. A failing ROLLBACK must not hide the original error.
    private func rollbackQuietly() {
        guard let generation = transactionGeneration, isSession(generation) else { return }
        do {
            try executeEndingTransaction("ROLLBACK")
        } catch {
            // The session is in an unknown state: close it, the next call starts clean.
            close()
        }
    }

    /// 10–40 ms times the attempt number, randomized so two retrying workers drift apart.
    private static func backoff(attempt: Int) {
        let milliseconds = attempt * Int.random(in: 10...40)
        usleep(UInt32(milliseconds * 1000))
    }
}
