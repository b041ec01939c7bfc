/// Why a database call failed.
///
/// A public struct over a private code enum (as postgres-nio's `PSQLError`), so new
/// causes can be added without breaking callers. Callers branch on the classification
/// (`isUnavailable`, `isDuplicateKey`, ...) and map it to an HTTP status or JSON-RPC code
/// in one place at the edge.
///
/// `description` is generic and safe to show anywhere: it never contains the server's
/// message (which may quote row data) nor bind values. `debugDescription` adds the server
/// message and the SQL text (never the binds) for logs that operators read.
struct DatabaseError: Error, Sendable, CustomStringConvertible, CustomDebugStringConvertible {
    /// The classification of a failure.
    struct Kind: Sendable, Hashable, CustomStringConvertible {
        fileprivate enum Code: String, Sendable {
            case unavailable = "database unavailable"
            case duplicateKey = "duplicate key"
            case deadlock = "deadlock"
            case lockWaitTimeout = "lock wait timeout"
            case statementTimeout = "statement timeout"
            case constraintViolation = "constraint violation"
            case invalidData = "invalid data"
            case invalidQuery = "invalid query"
            case server = "server error"
            case columnNotFound = "column not found"
            case typeMismatch = "type mismatch"
            case misuse = "misuse"
            case migration = "migration failed"
        }

        fileprivate let code: Code
        private init(_ code: Code) { self.code = code }

        /// The server cannot be reached or the connection was lost, or (Galera) the node is
        /// not part of the primary component and refuses statements (1047): map to 503, retry later.
        static let unavailable = Kind(.unavailable)
        /// A UNIQUE or PRIMARY KEY already holds the value (1062, 1586).
        static let duplicateKey = Kind(.duplicateKey)
        /// InnoDB chose this transaction as a deadlock victim (1213); on Galera also a write set
        /// that failed certification at COMMIT or was aborted by a replicated one, including
        /// an abort the server did not report (`transactionEndedByServer`).
        static let deadlock = Kind(.deadlock)
        /// A row lock was not granted within `innodb_lock_wait_timeout` (1205).
        static let lockWaitTimeout = Kind(.lockWaitTimeout)
        /// The server stopped the statement at the session's `max_statement_time` (1969), which
        /// this code sets just under `database.readTimeoutSeconds`: the call took too long,
        /// the connection is intact, and running it again as it is would take as long.
        static let statementTimeout = Kind(.statementTimeout)
        /// A CHECK (4025), FOREIGN KEY (1451, 1452) or NOT NULL (1048) constraint refused the row.
        static let constraintViolation = Kind(.constraintViolation)
        /// Strict mode refused a value: too long, out of range, bad date or number.
        static let invalidData = Kind(.invalidData)
        /// The SQL itself is wrong: syntax, unknown table or column (a programming error).
        static let invalidQuery = Kind(.invalidQuery)
        /// Any other server or client library error.
        static let server = Kind(.server)
        /// A row accessor named a column the result set does not have.
        static let columnNotFound = Kind(.columnNotFound)
        /// A row accessor asked for a type the column's value cannot be read as.
        static let typeMismatch = Kind(.typeMismatch)
        /// The API was used wrongly (bind count, nested transaction, statement after a lost transaction).
        static let misuse = Kind(.misuse)
        /// The migration runner refused to proceed (checksum changed, gap, duplicate, unreadable file).
        static let migration = Kind(.migration)

        var description: String { code.rawValue }
    }

    let kind: Kind
    /// The Connector/C or server error number (`mysql_errno`), 0 when the error did not come from them.
    let errno: UInt32
    /// The five-character SQLSTATE, `HY000` when unknown.
    let sqlState: String
    /// Safe context written by this code (a column name, a migration file), never row data.
    let detail: String?
    /// The server or library message; may quote data, so only in `debugDescription`.
    let serverMessage: String?
    /// The SQL text (placeholders, never values), for `debugDescription`.
    let sql: String?

    init(
        kind: Kind, errno: UInt32 = 0, sqlState: String = "HY000", detail: String? = nil,
        serverMessage: String? = nil, sql: String? = nil
    ) {
        self.kind = kind
        self.errno = errno
        self.sqlState = sqlState
        self.detail = detail
        self.serverMessage = serverMessage
        self.sql = sql
    }

    /// The server is down or the connection was lost; the next call reconnects. Map to 503.
    var isUnavailable: Bool { kind == .unavailable }
    /// A UNIQUE/PRIMARY KEY refused the row: for idempotent inserts this means "already done".
    var isDuplicateKey: Bool { kind == .duplicateKey }
    /// Deadlock (1213) or lock wait timeout (1205): the whole transaction may be retried.
    var isDeadlockOrLockWait: Bool { kind == .deadlock || kind == .lockWaitTimeout }
    /// The statement ran past the session's time limit and was stopped (not retried).
    var isStatementTimeout: Bool { kind == .statementTimeout }
    /// CHECK, FOREIGN KEY or NOT NULL constraint refused the row.
    var isConstraintViolation: Bool { kind == .constraintViolation }

    var description: String {
        var text = "database error: \(kind)"
        if let detail { text += " (\(detail))" }
        return text
    }

    var debugDescription: String {
        var text = description
        if errno != 0 { text += " [errno \(errno), sqlstate \(sqlState)]" }
        if let serverMessage { text += " message: \(serverMessage)" }
        if let sql { text += " sql: \(sql.count > 300 ? String(sql.prefix(300)) + "…" : sql)" }
        return text
    }
}

extension DatabaseError {
    /// Classifies a Connector/C or server error number.
    static func kind(forErrno errno: UInt32) -> Kind {
        switch errno {
        case 2001, 2002, 2003, 2004, 2005, 2006, 2011, 2012, 2013, 2026, 2048, 2055,
            1040, 1053, 1077, 1152, 1153, 1154, 1155, 1156, 1158, 1159, 1160, 1161, 1927:
            return .unavailable
        case 1969: return .statementTimeout
        // Galera: "WSREP has not yet prepared node for application use" (wsrep_ready OFF: a
        // node cut off in a minority partition, or still joining). The connection is fine and
        // the node answers again once it rejoins the primary component (docs/scaling.md).
        // 1180 "error during COMMIT": there, a commit the node could not replicate because
        // it lost the primary component while the transaction ran. Neither committed.
        case 1047, 1180: return .unavailable
        case 1062, 1586: return .duplicateKey
        case 1213: return .deadlock
        case 1205: return .lockWaitTimeout
        case 4025, 1451, 1452, 1216, 1217, 1048, 1364: return .constraintViolation
        case 1264, 1265, 1366, 1367, 1292, 1406, 1411, 1365, 4078, 4079: return .invalidData
        case 1054, 1064, 1146, 1149, 1210, 1243, 1247, 1052, 1110, 1136: return .invalidQuery
        default: return .server
        }
    }

    /// Whether the connection handle must be dropped (so the next call reconnects).
    var dropsConnection: Bool {
        switch errno {
        case 2001, 2002, 2003, 2004, 2005, 2006, 2011, 2012, 2013, 2026, 2048, 2055,
            1053, 1077, 1152, 1153, 1154, 1155, 1156, 1158, 1159, 1160, 1161, 1927:
            return true
        default:
            return false
        }
    }

    /// A statement inside a transaction succeeded, but the server's reply said no transaction
    /// was open any more: the server rolled it back without an error (a Galera brute-force
    /// abort, docs/scaling.md). A deadlock, so the whole transaction is retried.
    static func transactionEndedByServer(sql: String) -> DatabaseError {
        DatabaseError(kind: .deadlock, detail: endedByServerDetail, sql: sql)
    }

    private static let endedByServerDetail = "the server ended the transaction without an error"

    /// A `transactionEndedByServer` error: not the server's own report but this code's finding.
    var isTransactionEndedByServer: Bool { kind == .deadlock && errno == 0 && detail == Self.endedByServerDetail }

    static func misuse(_ detail: String, sql: String? = nil) -> DatabaseError {
        DatabaseError(kind: .misuse, detail: detail, sql: sql)
    }

    static func migration(_ detail: String, underlying: DatabaseError? = nil) -> DatabaseError {
        DatabaseError(
            kind: .migration, errno: underlying?.errno ?? 0, sqlState: underlying?.sqlState ?? "HY000",
            detail: detail, serverMessage: underlying?.serverMessage, sql: underlying?.sql)
    }
}
