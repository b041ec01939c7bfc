import CMariaDB

/// `mysql_server_init` must run once per process before any other call and is not
/// thread-safe; a lazily initialized global is initialized exactly once (swift_once).
private let libraryInitialized: Bool = cmariadb_library_init() == 0

/// Owns one `MYSQL*` connection: created connected, closed in `deinit`.
///
/// Statements hold a strong reference to their handle, so the connection outlives every
/// `MYSQL_STMT` prepared on it (`mysql_stmt_close` after `mysql_close` would be a use after free).
final class MariaDBHandle {
    private let mysql: UnsafeMutablePointer<MYSQL>

    private init(mysql: UnsafeMutablePointer<MYSQL>) { self.mysql = mysql }

    deinit { mysql_close(mysql) }

    /// Opens a connection: Unix socket when configured, else TCP; utf8mb4; UTC session;
    /// strict sql_mode; the configured lock wait and network timeouts.
    static func connect(_ config: DatabaseConfiguration) throws(DatabaseError) -> MariaDBHandle {
        guard libraryInitialized else {
            throw DatabaseError(kind: .unavailable, detail: "mysql_server_init failed")
        }
        // Connector/C wants mysql_thread_init on every thread that uses it (it is a cheap,
        // idempotent call in Connector/C 3.x); connections are confined to one thread, so
        // calling it whenever this thread opens one covers every thread that uses the API.
        _ = mysql_thread_init()
        guard let mysql = mysql_init(nil) else {
            throw DatabaseError(kind: .unavailable, detail: "mysql_init failed")
        }
        var connectTimeout = UInt32(clamping: max(1, config.connectTimeoutSeconds))
        var readTimeout = UInt32(clamping: max(1, config.readTimeoutSeconds))
        var writeTimeout = UInt32(clamping: max(1, config.writeTimeoutSeconds))
        var protocolType = config.socket == nil ? MYSQL_PROTOCOL_TCP.rawValue : MYSQL_PROTOCOL_SOCKET.rawValue
        var noReconnect: my_bool = 0
        // The session settings every statement of this code relies on. Integers only, no input.
        let lockWait = max(1, config.lockWaitTimeoutSeconds)
        let initCommand = "SET SESSION time_zone = '+00:00', "
            + "SESSION sql_mode = 'STRICT_ALL_TABLES,ERROR_FOR_DIVISION_BY_ZERO,NO_ZERO_DATE,NO_ZERO_IN_DATE,NO_ENGINE_SUBSTITUTION', "
            + "SESSION innodb_lock_wait_timeout = \(lockWait)"
        mysql_options(mysql, MYSQL_OPT_CONNECT_TIMEOUT, &connectTimeout)
        mysql_options(mysql, MYSQL_OPT_READ_TIMEOUT, &readTimeout)
        mysql_options(mysql, MYSQL_OPT_WRITE_TIMEOUT, &writeTimeout)
        mysql_options(mysql, MYSQL_OPT_PROTOCOL, &protocolType)
        mysql_options(mysql, MYSQL_OPT_RECONNECT, &noReconnect)
        mysql_options(mysql, MYSQL_SET_CHARSET_NAME, "utf8mb4")
        mysql_options(mysql, MYSQL_INIT_COMMAND, initCommand)

        let host = config.socket == nil ? config.host : "localhost"
        let database: String? = config.name.isEmpty ? nil : config.name
        let connected = mysql_real_connect(mysql, host, config.user, config.password, database,
                                           UInt32(clamping: config.port), config.socket, 0)
        guard connected != nil else {
            let error = DatabaseError.fromConnection(mysql, operation: "connect")
            mysql_close(mysql)
            // Whatever the cause (server down, access denied, unknown database), no
            // connection means the caller should answer "unavailable" and retry later.
            throw DatabaseError(kind: .unavailable, errno: error.errno, sqlState: error.sqlState,
                                detail: "connect", serverMessage: error.serverMessage)
        }
        return MariaDBHandle(mysql: mysql)
    }

    func withMySQL<R, E: Error>(_ body: (UnsafeMutablePointer<MYSQL>) throws(E) -> R) throws(E) -> R {
        try body(mysql)
    }

    /// `mysql_ping`: a round trip that fails fast on a closed socket.
    func ping() throws(DatabaseError) {
        if mysql_ping(mysql) != 0 { throw DatabaseError.fromConnection(mysql, operation: "ping") }
    }

    /// Runs trusted multi-statement SQL (migrations only; see `DatabaseConnection.executeScript`).
    /// Multi-statements are switched on for this call only, so a prepared statement can never
    /// carry a second statement.
    func executeScript(_ sql: String) throws(DatabaseError) {
        guard mysql_set_server_option(mysql, MYSQL_OPTION_MULTI_STATEMENTS_ON) == 0 else {
            throw DatabaseError.fromConnection(mysql, operation: "multi-statements on")
        }
        defer { _ = mysql_set_server_option(mysql, MYSQL_OPTION_MULTI_STATEMENTS_OFF) }
        var utf8 = Array(sql.utf8)
        utf8.append(0)
        let rc = utf8.withUnsafeBufferPointer { buffer in
            buffer.withMemoryRebound(to: CChar.self) { mysql_real_query(mysql, $0.baseAddress, UInt(buffer.count - 1)) }
        }
        var statement = 1
        if rc != 0 { throw DatabaseError.fromConnection(mysql, operation: "script statement \(statement)", sql: sql) }
        while true {
            if let result = mysql_store_result(mysql) {
                mysql_free_result(result)
            } else if mysql_field_count(mysql) != 0 {
                throw DatabaseError.fromConnection(mysql, operation: "script statement \(statement)", sql: sql)
            }
            let next = mysql_next_result(mysql)
            if next == -1 { return }
            statement += 1
            if next > 0 { throw DatabaseError.fromConnection(mysql, operation: "script statement \(statement)", sql: sql) }
        }
    }
}

extension DatabaseError {
    /// The current error of a connection, classified. The server message stays out of `description`.
    static func fromConnection(_ mysql: UnsafeMutablePointer<MYSQL>, operation: String, sql: String? = nil) -> DatabaseError {
        let errno = mysql_errno(mysql)
        return DatabaseError(kind: kind(forErrno: errno), errno: errno,
                             sqlState: mysql_sqlstate(mysql).map { String(cString: $0) } ?? "HY000",
                             detail: operation, serverMessage: mysql_error(mysql).map { String(cString: $0) }, sql: sql)
    }
}
