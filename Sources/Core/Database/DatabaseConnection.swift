/// One MariaDB connection, confined to the thread that uses it (one per worker thread).
///
/// The connection opens lazily on first use and re-opens by itself: when a call fails
/// because the server went away (2006, 2013, 2002, 2003, ...), the handle and its prepared
/// statements are dropped and that call throws `.unavailable` (the caller answers 503);
/// the next call connects again. Statements are never retried silently, since they may not
/// be idempotent; only `ping()` reconnects within the call.
///
/// Every statement is a server-side prepared statement, cached per connection by SQL text.
final class DatabaseConnection {
    let configuration: DatabaseConfiguration
    private var handle: MariaDBHandle?
    private var statements: StatementCache
    /// Incremented on every drop, so a transaction can tell its session was lost.
    private var generation = 0
    /// The generation a running `transaction` began on; nil outside transactions.
    var transactionGeneration: Int?
    /// The isolation level this session was last set to, and the session it was set on
    /// (`inTransaction` sets it only when it changes: one round trip less per transaction).
    var sessionIsolation: (generation: Int, level: IsolationLevel)?
    /// What the open transaction registered to run once it has committed (`afterCommit`).
    var afterCommitSteps: [(DatabaseConnection) throws -> Void] = []
    /// What the open transaction registered to run just before its COMMIT (`beforeCommit`),
    /// and their keys.
    var beforeCommitSteps: [(DatabaseConnection) throws -> Void] = []
    var beforeCommitKeys: Set<String> = []
    /// What the open transaction keeps for its steps (`transactionLocal`).
    var transactionLocals: [String: AnyObject] = [:]

    /// Does not connect; the first call does.
    /// Told each time a transaction is rolled back and run again (deadlock, lock wait), with
    /// the error of the failed attempt: the process's metrics and log, wired by the composition root.
    let onRetry: @Sendable (DatabaseError) -> Void
    /// Statements run at the start of every session (the first connect and each reconnect),
    /// e.g. the admin connection's peer for the audit trigger (`SET @billing_peer_uid = ?`).
    let sessionSetup: [SQLQuery]

    init(
        configuration: DatabaseConfiguration, statementCacheCapacity: Int = 128, sessionSetup: [SQLQuery] = [],
        onRetry: @escaping @Sendable (DatabaseError) -> Void = { _ in }
    ) {
        self.onRetry = onRetry
        self.sessionSetup = sessionSetup
        self.configuration = configuration
        self.statements = StatementCache(capacity: statementCacheCapacity)
    }

    /// Whether a server session is currently open.
    var isConnected: Bool { handle != nil }

    /// Closes the session (if any); the next call reconnects.
    func close() { dropHandle() }

    /// Health check: reconnects at most once and is bounded by the connect timeout when the
    /// server is down; succeeds again once the server is back, without a process restart.
    func ping() throws(DatabaseError) {
        if let handle {
            do {
                try handle.ping()
                return
            } catch {
                guard error.dropsConnection else { throw error }
                dropHandle()
            }
        }
        try acquireHandle().ping()
    }

    /// Runs a statement and returns all its rows (buffered).
    func query(_ query: SQLQuery) throws(DatabaseError) -> [SQLRow] {
        var rows: [SQLRow] = []
        try forEachRow(query) { (row: SQLRow) throws(DatabaseError) in rows.append(row) }
        return rows
    }

    /// Runs a statement and hands its rows to `body` one at a time, in order, keeping none:
    /// for results too long to hold as Swift values (the stats' scan of a period's events).
    /// The result is still buffered whole by the client library; `body` must not run
    /// statements on this connection.
    func forEachRow(_ query: SQLQuery, _ body: (SQLRow) throws(DatabaseError) -> Void) throws(DatabaseError) {
        _ = try withoutActuallyEscaping(body) { (body) throws(DatabaseError) in try run(query, eachRow: body) }
    }

    /// `forEachRow` without the client library's buffer: the rows come from the server as
    /// `body` takes them, so memory is one row whatever the result's length (a report's
    /// hundreds of thousands of stored states). The session is busy until the last row:
    /// `body` must not run statements on this connection. A `body` that throws ends the
    /// read; the rest of the result is discarded.
    func streamRows(_ query: SQLQuery, _ body: (SQLRow) throws(DatabaseError) -> Void) throws(DatabaseError) {
        _ = try withoutActuallyEscaping(body) { (body) throws(DatabaseError) in try run(query, buffered: false, eachRow: body) }
    }

    /// The first row, or nil. Add `LIMIT 1` to the SQL when more rows could match.
    func queryOne(_ query: SQLQuery) throws(DatabaseError) -> SQLRow? {
        try self.query(query).first
    }

    /// Runs a statement for its effect (INSERT, UPDATE, DELETE, DDL); any rows are discarded.
    @discardableResult
    func execute(_ query: SQLQuery) throws(DatabaseError) -> ExecuteResult {
        try run(query, eachRow: nil)
    }

    /// The number of prepared statements currently cached (for tests and diagnostics).
    var cachedStatementCount: Int { statements.count }

    /// COMMIT or ROLLBACK of the open `transaction` (`inTransaction` only): the one statement
    /// inside a transaction whose reply may say that no transaction is open.
    func executeEndingTransaction(_ query: SQLQuery) throws(DatabaseError) {
        try run(query, endsTransaction: true, eachRow: nil)
    }

    // MARK: - Internals

    @discardableResult
    private func run(
        _ query: SQLQuery, endsTransaction: Bool = false, buffered: Bool = true,
        eachRow: ((SQLRow) throws(DatabaseError) -> Void)?
    ) throws(DatabaseError) -> ExecuteResult {
        let handle = try acquireHandle()
        do throws(DatabaseError) {
            let statement: PreparedStatement
            if let cached = statements.statement(for: query.text) {
                statement = cached
            } else {
                statement = try PreparedStatement(handle: handle, text: query.text)
                statements.insert(statement)
            }
            let outcome = try statement.run(query.binds, buffered: buffered, eachRow: eachRow)
            // Inside a transaction every reply must still report it open. A reply that does
            // not means the server ended (rolled back) the transaction without reporting an
            // error: on Galera, a brute-force abort during a locking UNION read answered
            // with its rows (docs/scaling.md). The next statements would run in autocommit
            // mode and COMMIT would commit nothing, so the transaction fails here instead,
            // as the deadlock it was, and `transaction(retries:)` runs it again.
            if transactionGeneration != nil && !endsTransaction && !handle.serverReportsOpenTransaction {
                throw DatabaseError.transactionEndedByServer(sql: query.sql)
            }
            return outcome
        } catch {
            handleFailure(error, text: query.text)
            throw error
        }
    }

    /// Drops the session after a connection-level error; forgets a statement that failed in
    /// the client library (its state is unknown). Server errors such as a duplicate key
    /// leave the statement reusable.
    private func handleFailure(_ error: DatabaseError, text: SQLText) {
        if error.dropsConnection {
            dropHandle()
        } else if error.errno >= 2000 && error.errno < 3000 {
            statements.remove(text)
        }
    }

    private func acquireHandle() throws(DatabaseError) -> MariaDBHandle {
        if let handle { return handle }
        // Reconnecting in the middle of a transaction would silently run the rest of its
        // statements in autocommit mode on a new session.
        if transactionGeneration != nil {
            throw DatabaseError(kind: .unavailable, detail: "connection lost during transaction")
        }
        let opened = try MariaDBHandle.connect(configuration)
        handle = opened
        for statement in sessionSetup {
            do {
                _ = try PreparedStatement(handle: opened, text: statement.text).run(statement.binds, eachRow: nil)
            } catch {
                dropHandle()
                throw error
            }
        }
        return opened
    }

    private func dropHandle() {
        // Statements first: each keeps the handle alive until it is closed.
        statements.removeAll()
        handle = nil
        generation += 1
    }

    /// Whether the session a transaction began on is still the open one.
    func isSession(_ sessionGeneration: Int) -> Bool { handle != nil && generation == sessionGeneration }

    var currentGeneration: Int { generation }

    /// Trusted multi-statement SQL from the repository (migrations). The one place that
    /// sends SQL without preparing it: DDL files cannot be prepared as one statement, and
    /// splitting them on `;` is unsafe with COMMENT strings; the server's parser does it right.
    func executeScript(unsafeSQL sql: String) throws(DatabaseError) {
        let handle = try acquireHandle()
        do {
            try handle.executeScript(sql)
        } catch {
            if error.dropsConnection { dropHandle() }
            throw error
        }
    }
}

/// A connection belongs to one thread; it holds a C handle without locks.
@available(*, unavailable)
extension DatabaseConnection: Sendable {}
