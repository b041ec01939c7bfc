import Foundation
import Synchronization
import Testing

@testable import Core

private struct BodyFailure: Error {}

@Suite struct TransactionTests {
    @Test func commitPersistsAndRollbackUndoes() throws {
        try withTestConnection { db in
            try db.execute("CREATE TABLE t (id INT PRIMARY KEY) ENGINE=InnoDB")
            let value = try db.transaction { tx in
                try tx.execute("INSERT INTO t VALUES (\(1))")
                return "done"
            }
            #expect(value == "done")
            #expect(throws: BodyFailure.self) {
                try db.transaction { tx in
                    try tx.execute("INSERT INTO t VALUES (\(2))")
                    throw BodyFailure()
                }
            }
            // A database error inside rolls back the earlier statements too.
            let duplicate = #expect(throws: DatabaseError.self) {
                try db.transaction { tx in
                    try tx.execute("INSERT INTO t VALUES (\(3))")
                    try tx.execute("INSERT INTO t VALUES (\(1))")
                }
            }
            #expect(duplicate?.isDuplicateKey == true)
            #expect(try db.query("SELECT id FROM t ORDER BY id").map { try $0.int("id") } == [1])
            // Visible from another session: really committed.
            let other = DatabaseConnection(configuration: db.configuration)
            #expect(try other.query("SELECT id FROM t").count == 1)
        }
    }

    /// The isolation is set on the session only when it changes, and every transaction runs
    /// at the level it asked for, whatever ran before it on the connection, a snapshot read
    /// always at repeatable read, and after a reconnect too.
    @Test func everyTransactionRunsAtItsIsolationWhateverRanBefore() throws {
        try withTestConnection { db in
            func level(_ tx: DatabaseConnection) throws -> String {
                try tx.queryOne("SELECT @@tx_isolation AS level")!.string("level")
            }
            let sequence: [IsolationLevel?] = [.readCommitted, .readCommitted, nil, .readCommitted, .repeatableRead, nil, .readCommitted]
            for asked in sequence {
                let seen = try db.transaction(retries: 0, isolation: asked) { tx in try level(tx) }
                #expect(seen == (asked == .readCommitted ? "READ-COMMITTED" : "REPEATABLE-READ"), "\(String(describing: asked))")
            }
            #expect(try db.readOnlySnapshot { tx in try level(tx) } == "REPEATABLE-READ")
            _ = try db.transaction(retries: 0, isolation: .readCommitted) { tx in try level(tx) }
            #expect(try db.readOnlySnapshot { tx in try level(tx) } == "REPEATABLE-READ")
            // A new session starts from the server's default: the level is set again.
            _ = try db.transaction(retries: 0, isolation: .readCommitted) { tx in try level(tx) }
            db.close()
            #expect(try db.transaction(retries: 0, isolation: .readCommitted) { tx in try level(tx) } == "READ-COMMITTED")
            db.close()
            try db.execute("SET SESSION TRANSACTION ISOLATION LEVEL READ COMMITTED")
            db.close()
            #expect(try db.transaction(retries: 0) { tx in try level(tx) } == "REPEATABLE-READ")
        }
    }

    /// On Galera a brute-force abort once rolled a transaction back in the middle of a
    /// locking read, and the server still answered that read with its rows (docs/scaling.md):
    /// the rest of the body then ran in autocommit mode and COMMIT committed nothing, so an
    /// acknowledged delivery was missing. A single server does not do that; a ROLLBACK inside
    /// the body ends the transaction on the server the same way, behind the back of
    /// `transaction`, with a successful reply. Every reply inside a transaction must report it
    /// still open: the attempt fails there as a deadlock and is run again, and nothing of the
    /// broken attempt commits (before the fix: one attempt, the first row lost, the second
    /// committed on its own).
    @Test func aTransactionTheServerEndedSilentlyIsRetriedNotHalfCommitted() throws {
        try withTestDatabase { configuration, _ in
            let retries = Mutex(0)
            let db = DatabaseConnection(
                configuration: configuration,
                onRetry: { error in
                    retries.withLock { $0 += 1 }
                    #expect(error.isTransactionEndedByServer)
                })
            try db.execute("CREATE TABLE t (id INT PRIMARY KEY) ENGINE=InnoDB")
            var attempts = 0
            try db.transaction(retries: 2) { tx in
                attempts += 1
                try tx.execute("INSERT INTO t VALUES (\(attempts * 10 + 1))")
                if attempts == 1 { try tx.execute("ROLLBACK") }
                try tx.execute("INSERT INTO t VALUES (\(attempts * 10 + 2))")
            }
            #expect(attempts == 2)
            #expect(retries.withLock { $0 } == 1)
            #expect(try db.query("SELECT id FROM t ORDER BY id").map { try $0.int("id") } == [21, 22])

            // Without retries the transaction fails as a deadlock (503 at the edge, retried by
            // the caller), and the statement after the silent end never runs.
            try db.execute("DELETE FROM t")
            let error = #expect(throws: DatabaseError.self) {
                try db.transaction { tx in
                    try tx.execute("INSERT INTO t VALUES (\(1))")
                    _ = try tx.query("SELECT id FROM t WHERE id = \(1)")
                    try tx.execute("ROLLBACK")
                    try tx.execute("INSERT INTO t VALUES (\(2))")
                }
            }
            #expect(error?.kind == .deadlock)
            #expect(error?.isDeadlockOrLockWait == true)
            #expect(try db.query("SELECT id FROM t").isEmpty)

            // A read-only snapshot is checked the same way; an ordinary transaction is not disturbed.
            let snapshot = #expect(throws: DatabaseError.self) {
                try db.readOnlySnapshot { tx in
                    _ = try tx.query("SELECT id FROM t")
                    try tx.execute("ROLLBACK")
                    _ = try tx.query("SELECT id FROM t")
                }
            }
            #expect(snapshot?.kind == .deadlock)
            #expect(try db.transaction { tx in try tx.query("SELECT COUNT(*) AS n FROM t").first?.int("n") } == 0)
        }
    }

    @Test func nestedTransactionIsRefused() throws {
        try withTestConnection { db in
            let error = #expect(throws: DatabaseError.self) {
                try db.transaction { tx in try tx.transaction { _ in 1 } }
            }
            #expect(error?.kind == .misuse)
            let two = try db.transaction { _ in 2 }
            #expect(two == 2)
        }
    }

    @Test func afterCommitStepsRunOnceCommittedInOrderAndGoWithARollback() throws {
        try withTestConnection { db in
            try db.execute("CREATE TABLE t (id INT PRIMARY KEY) ENGINE=InnoDB")
            #expect(throws: DatabaseError.self) { try db.afterCommit { _ in } }
            // Committed: the steps run in order, outside the transaction, and see its rows.
            let seen = Mutex<[String]>([])
            try db.transaction { tx in
                try tx.execute("INSERT INTO t VALUES (\(1))")
                try tx.afterCommit { db in
                    let n = try db.transaction { tx in try tx.queryOne("SELECT COUNT(*) AS n FROM t")?.int("n") }
                    seen.withLock { $0.append("first \(db.isInTransaction) \(n ?? -1)") }
                }
                try tx.afterCommit { _ in seen.withLock { $0.append("second") } }
                #expect(seen.withLock { $0.isEmpty }, "nothing runs before the commit")
            }
            #expect(seen.withLock { $0 } == ["first false 1", "second"])
            // Rolled back: the steps go with it.
            #expect(throws: BodyFailure.self) {
                try db.transaction { tx in
                    try tx.afterCommit { _ in seen.withLock { $0.append("rolled back") } }
                    throw BodyFailure()
                }
            }
            // Retried: only the attempt that committed registers what runs.
            let attempts = Mutex(0)
            try db.transaction(retries: 2) { tx in
                let attempt = attempts.withLock {
                    $0 += 1
                    return $0
                }
                try tx.afterCommit { _ in seen.withLock { $0.append("attempt \(attempt)") } }
                if attempt == 1 { throw DatabaseError.transactionEndedByServer(sql: "test") }
            }
            #expect(seen.withLock { $0 } == ["first false 1", "second", "attempt 2"])
            // A failing step throws, the transaction stays committed and its body does not run again.
            let bodies = Mutex(0)
            #expect(throws: DatabaseError.self) {
                try db.transaction(retries: 3) { tx in
                    bodies.withLock { $0 += 1 }
                    try tx.execute("INSERT INTO t VALUES (\(2))")
                    try tx.afterCommit { _ in throw DatabaseError.transactionEndedByServer(sql: "step") }
                }
            }
            #expect(bodies.withLock { $0 } == 1 && db.afterCommitSteps.isEmpty)
            #expect(try db.transaction { tx in try tx.query("SELECT COUNT(*) AS n FROM t").first?.int("n") } == 2)
            // A read-only snapshot runs its steps too.
            try db.readOnlySnapshot { tx in try tx.afterCommit { _ in seen.withLock { $0.append("read only") } } }
            #expect(seen.withLock { $0.last } == "read only")
        }
    }

    @Test func beforeCommitStepsRunOncePerKeyInsideTheTransactionAndAFailingOneRollsItBack() throws {
        try withTestConnection { db in
            try db.execute("CREATE TABLE b (id INT PRIMARY KEY, note VARCHAR(32) NOT NULL) ENGINE=InnoDB")
            #expect(throws: DatabaseError.self) { try db.beforeCommit(key: "k") { _ in } }
            // Once per key, in the order first registered, inside the transaction, after the body.
            try db.transaction { tx in
                try tx.execute("INSERT INTO b VALUES (1, 'body')")
                for n in 0..<3 {
                    try tx.beforeCommit(key: "user u") { db in
                        #expect(db.isInTransaction)
                        let rows = try db.queryOne("SELECT COUNT(*) AS n FROM b")?.int("n") ?? -1
                        try db.execute("INSERT INTO b VALUES (\(10 + n), \("seen \(rows)"))")
                    }
                }
                try tx.beforeCommit(key: "user v") { db in try db.execute("INSERT INTO b VALUES (20, 'v')") }
                try tx.execute("INSERT INTO b VALUES (2, 'body')")
            }
            let rows = try db.query("SELECT id, note FROM b ORDER BY id").map { (row) throws(DatabaseError) in
                "\(try row.int("id")) \(try row.string("note"))"
            }
            #expect(rows == ["1 body", "2 body", "10 seen 2", "20 v"])
            // A step that fails rolls back the whole transaction; the next one starts clean.
            #expect(throws: DatabaseError.self) {
                try db.transaction { tx in
                    try tx.execute("INSERT INTO b VALUES (3, 'body')")
                    try tx.beforeCommit(key: "user u") { db in try db.execute("INSERT INTO b VALUES (1, 'duplicate')") }
                }
            }
            try db.transaction { tx in try tx.beforeCommit(key: "user u") { db in try db.execute("INSERT INTO b VALUES (4, 'again')") } }
            #expect(try db.queryOne("SELECT GROUP_CONCAT(id ORDER BY id) AS ids FROM b")?.string("ids") == "1,2,4,10,20")
        }
    }

    @Test func lockWaitTimeoutIsRetriedABoundedNumberOfTimes() throws {
        try withTestDatabase { configuration, environment in
            var shortWait = configuration
            shortWait.lockWaitTimeoutSeconds = 1
            let holder = DatabaseConnection(configuration: configuration)
            try holder.execute("CREATE TABLE r (id INT PRIMARY KEY, n INT NOT NULL) ENGINE=InnoDB")
            try holder.execute("INSERT INTO r VALUES (1, 0)")
            try holder.execute("START TRANSACTION")
            _ = try holder.query("SELECT n FROM r WHERE id = 1 FOR UPDATE")

            let waiter = DatabaseConnection(configuration: shortWait)
            var attempts = 0
            let start = monotonicMilliseconds()
            let error = #expect(throws: DatabaseError.self) {
                try waiter.transaction(retries: 2) { tx in
                    attempts += 1
                    try tx.execute("UPDATE r SET n = n + 1 WHERE id = 1")
                }
            }
            let elapsed = monotonicMilliseconds() - start
            #expect(error?.kind == .lockWaitTimeout)
            #expect(error?.errno == 1205)
            #expect(error?.isDeadlockOrLockWait == true)
            #expect(attempts == 3, "one try plus two retries")
            #expect(elapsed >= 3000 && elapsed < 8000)

            // Without retries: exactly one attempt.
            attempts = 0
            #expect(throws: DatabaseError.self) {
                try waiter.transaction { tx in
                    attempts += 1
                    try tx.execute("UPDATE r SET n = n + 1 WHERE id = 1")
                }
            }
            #expect(attempts == 1)
            try holder.execute("ROLLBACK")
            #expect(try holder.queryOne("SELECT n FROM r WHERE id = 1")?.int("n") == 0)
        }
    }

    @Test func retrySucceedsOnceTheLockIsReleased() throws {
        try withTestDatabase { configuration, _ in
            let holder = DatabaseConnection(configuration: configuration)
            try holder.execute("CREATE TABLE r (id INT PRIMARY KEY, n INT NOT NULL) ENGINE=InnoDB")
            try holder.execute("INSERT INTO r VALUES (1, 0)")
            try holder.execute("START TRANSACTION")
            try holder.execute("UPDATE r SET n = 100 WHERE id = 1")

            var shortWaitConfiguration = configuration
            shortWaitConfiguration.lockWaitTimeoutSeconds = 1
            let shortWait = shortWaitConfiguration
            let wait = onThread { () throws -> Int in
                let waiter = DatabaseConnection(configuration: shortWait)
                var attempts = 0
                try waiter.transaction(retries: 3) { tx in
                    attempts += 1
                    try tx.execute("UPDATE r SET n = n + 1 WHERE id = 1")
                }
                return attempts
            }
            usleep(1_500_000)
            try holder.execute("COMMIT")
            let attempts = try wait()
            #expect(attempts == 2, "the first attempt timed out at 1 s, the retry got the lock after the commit at 1.5 s")
            #expect(try holder.queryOne("SELECT n FROM r WHERE id = 1")?.int("n") == 101)
        }
    }

    @Test func deadlockIsTypedAndRetried() throws {
        try withTestDatabase { configuration, _ in
            let setup = DatabaseConnection(configuration: configuration)
            try setup.execute("CREATE TABLE r (id INT PRIMARY KEY, n INT NOT NULL) ENGINE=InnoDB")
            try setup.execute("INSERT INTO r VALUES (1, 0), (2, 0)")

            // Two transactions lock rows 1 and 2 in opposite orders; a barrier makes both hold
            // their first lock before asking for the second, so InnoDB must pick a victim.
            let barrier = Mutex(0)
            let deadlocks = Mutex(0)
            func worker(first: Int, second: Int) -> () throws -> Int {
                onThread {
                    let db = DatabaseConnection(configuration: configuration)
                    var attempts = 0
                    do {
                        try db.transaction(retries: 3) { tx in
                            attempts += 1
                            try tx.execute("UPDATE r SET n = n + 1 WHERE id = \(first)")
                            if attempts == 1 {
                                barrier.withLock { $0 += 1 }
                                while barrier.withLock({ $0 }) < 2 { usleep(1000) }
                            }
                            try tx.execute("UPDATE r SET n = n + 1 WHERE id = \(second)")
                        }
                    } catch let error as DatabaseError {
                        Issue.record("unexpected \(error.debugDescription)")
                    }
                    if attempts > 1 { deadlocks.withLock { $0 += 1 } }
                    return attempts
                }
            }
            let a = worker(first: 1, second: 2)
            let b = worker(first: 2, second: 1)
            let attempts = try a() + b()
            #expect(attempts == 3, "exactly one victim, retried once")
            #expect(deadlocks.withLock { $0 } == 1)
            #expect(try setup.query("SELECT n FROM r ORDER BY id").map { try $0.int("n") } == [2, 2])
        }
    }
}
