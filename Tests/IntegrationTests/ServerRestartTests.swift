import Foundation
import Testing

@testable import Core

/// Stops and starts the test server through `BILLING_TEST_MARIADB_CTL`, so it must not run
/// alongside other tests: run it on its own with `swift test --filter ServerRestartTests`
/// and run the rest with `--skip ServerRestartTests` (scripts/test does both).
@Suite(.serialized) struct ServerRestartTests {
    /// Runs `$BILLING_TEST_MARIADB_CTL command` through /bin/sh and waits for it with
    /// posix_spawn + waitpid. (Foundation's Process waits for a socket that the backgrounded
    /// mariadbd inherits, so its waitUntilExit never returns after `start`.)
    private func control(_ command: String) throws {
        let ctl = try TestEnvironment.required("BILLING_TEST_MARIADB_CTL", "command that takes stop/start for the test MariaDB")
        let arguments = ["/bin/sh", "-c", "\(ctl) \(command) </dev/null"]
        var argv: [UnsafeMutablePointer<CChar>?] = arguments.map { strdup($0) } + [nil]
        defer { for argument in argv { free(argument) } }
        var pid: pid_t = 0
        let spawned = posix_spawn(&pid, "/bin/sh", nil, nil, &argv, environ)
        guard spawned == 0 else {
            throw TestEnvironment.Missing(variable: "BILLING_TEST_MARIADB_CTL", meaning: "cannot spawn /bin/sh: \(spawned)")
        }
        var status: Int32 = 0
        while waitpid(pid, &status, 0) < 0 && errno == EINTR {}
        guard status == 0 else {
            throw TestEnvironment.Missing(variable: "BILLING_TEST_MARIADB_CTL", meaning: "'\(ctl) \(command)' failed with wait status \(status)")
        }
    }

    @Test func reconnectsAfterTheServerRestarts() throws {
        _ = try TestEnvironment.required("BILLING_TEST_MARIADB_CTL", "command that takes stop/start for the test MariaDB")
        try withTestDatabase { configuration, _ in
            let db = DatabaseConnection(configuration: configuration)
            try db.execute("CREATE TABLE t (id INT PRIMARY KEY, v VARCHAR(16) NOT NULL)")
            try db.execute("INSERT INTO t VALUES (\(1), \("before"))")
            try db.ping()
            #expect(db.cachedStatementCount > 0)

            try control("stop")
            var restarted = false
            defer { if !restarted { try? control("start") } }

            // The statement that meets the dead session fails as unavailable and drops it.
            let lost = #expect(throws: DatabaseError.self) { try db.query("SELECT v FROM t WHERE id = \(1)") }
            #expect(lost?.isUnavailable == true)
            #expect(db.isConnected == false)
            #expect(db.cachedStatementCount == 0)

            // While down, ping and statements fail fast, bounded by the connect timeout.
            for _ in 0..<3 {
                let start = monotonicMilliseconds()
                let down = #expect(throws: DatabaseError.self) { try db.ping() }
                #expect(down?.isUnavailable == true)
                #expect(monotonicMilliseconds() - start <= Int64(configuration.connectTimeoutSeconds) * 1000 + 500)
            }
            let transaction = #expect(throws: DatabaseError.self) { try db.transaction { tx in try tx.execute("DELETE FROM t") } }
            #expect(transaction?.isUnavailable == true)

            try control("start")
            restarted = true

            // Same object, no process restart: the next call reconnects and re-prepares.
            try db.ping()
            #expect(db.isConnected)
            #expect(try db.queryOne("SELECT v FROM t WHERE id = \(1)")?.string("v") == "before")
            try db.execute("INSERT INTO t VALUES (\(2), \("after"))")
            #expect(try db.query("SELECT id FROM t").count == 2)
        }
    }

    @Test func pingReconnectsAnIdleSessionAfterRestart() throws {
        try withTestDatabase { configuration, _ in
            let db = DatabaseConnection(configuration: configuration)
            try db.ping()
            try control("stop")
            try control("start")
            // The old session is dead; ping notices, reconnects once and succeeds.
            try db.ping()
            #expect(db.isConnected)
            let restartedInTransaction = DatabaseConnection(configuration: configuration)
            try restartedInTransaction.execute("CREATE TABLE t (id INT PRIMARY KEY)")
            // Lost inside a transaction: no silent reconnect into autocommit mode.
            let error = #expect(throws: DatabaseError.self) {
                try restartedInTransaction.transaction { tx in
                    try tx.execute("INSERT INTO t VALUES (\(1))")
                    try control("stop")
                    try control("start")
                    try tx.execute("INSERT INTO t VALUES (\(2))")
                }
            }
            #expect(error?.isUnavailable == true)
            #expect(try restartedInTransaction.query("SELECT id FROM t").isEmpty)
        }
    }
}
