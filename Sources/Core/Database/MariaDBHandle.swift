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
        // The server stops a statement half a second before the client would stop waiting
        // for it (MYSQL_OPT_READ_TIMEOUT): a long statement ends as a statement timeout
        // (1969), reported as such, on a connection that stays usable, instead of a lost
        // connection that reads as "database unavailable".
        let statementLimit = Double(max(1, config.readTimeoutSeconds)) - 0.5
        let initCommand =
            "SET SESSION time_zone = '+00:00', "
            + "SESSION sql_mode = 'STRICT_ALL_TABLES,ERROR_FOR_DIVISION_BY_ZERO,NO_ZERO_DATE,NO_ZERO_IN_DATE,NO_ENGINE_SUBSTITUTION', "
            + "SESSION innodb_lock_wait_timeout = \(lockWait), SESSION max_statement_time = \(statementLimit), "
            // A sort carries the columns it returns instead of reading each row again by its
            // key after sorting (the server's 1 KiB default counts a VARCHAR's full width):
            // the statistics' groupings by subscription and by user (docs/performance.md).
            + "SESSION max_length_for_sort_data = 8192"
        mysql_options(mysql, MYSQL_OPT_CONNECT_TIMEOUT, &connectTimeout)
        mysql_options(mysql, MYSQL_OPT_READ_TIMEOUT, &readTimeout)
        mysql_options(mysql, MYSQL_OPT_WRITE_TIMEOUT, &writeTimeout)
        mysql_options(mysql, MYSQL_OPT_PROTOCOL, &protocolType)
        mysql_options(mysql, MYSQL_OPT_RECONNECT, &noReconnect)
        mysql_options(mysql, MYSQL_SET_CHARSET_NAME, "utf8mb4")
        mysql_options(mysql, MYSQL_INIT_COMMAND, initCommand)
        if let tls = config.tls {
            do { try requireTLS(mysql, tls) } catch {
                mysql_close(mysql)
                throw error
            }
        }

        let host = config.socket == nil ? config.host : "localhost"
        let database: String? = config.name.isEmpty ? nil : config.name
        let operation = config.tls == nil ? "connect" : "connect over TLS"
        let connected = mysql_real_connect(
            mysql, host, config.user, config.password, database,
            UInt32(clamping: config.port), config.socket, 0)
        guard connected != nil else {
            let error = DatabaseError.fromConnection(mysql, operation: operation)
            mysql_close(mysql)
            // Whatever the cause (server down, access denied, unknown database, a server
            // certificate that does not verify), no connection means the caller should
            // answer "unavailable" and retry later.
            throw DatabaseError(
                kind: .unavailable, errno: error.errno, sqlState: error.sqlState,
                detail: operation, serverMessage: error.serverMessage)
        }
        // Belt and braces: the options above make Connector/C fail rather than fall back,
        // and a session that is not encrypted is refused here all the same.
        if config.tls != nil && mysql_get_ssl_cipher(mysql) == nil {
            mysql_close(mysql)
            throw DatabaseError(
                kind: .unavailable, errno: UInt32(CR_SSL_CONNECTION_ERROR), detail: operation,
                serverMessage: "the session is not encrypted although database.tls is set")
        }
        return MariaDBHandle(mysql: mysql)
    }

    /// Encryption that verifies the server or no connection: the CA to check the server's
    /// chain against, the client certificate if any, the server's name checked against
    /// `host` (MYSQL_OPT_SSL_VERIFY_SERVER_CERT; with it, a server that offers no TLS is an
    /// error, CR_SSL_CONNECTION_ERROR, instead of a plaintext session), TLS 1.2 or later.
    /// An option the library refuses is an error too, never a weaker connection.
    private static func requireTLS(_ mysql: UnsafeMutablePointer<MYSQL>, _ tls: DatabaseConfiguration.TLS) throws(DatabaseError) {
        var yes: my_bool = 1
        var refused: [String] = []
        func set(_ option: mysql_option, _ name: String, _ value: UnsafeRawPointer?) {
            if mysql_options(mysql, option, value) != 0 { refused.append(name) }
        }
        set(MYSQL_OPT_SSL_CA, "MYSQL_OPT_SSL_CA", tls.caFile)
        if let cert = tls.certFile, let key = tls.keyFile {
            set(MYSQL_OPT_SSL_CERT, "MYSQL_OPT_SSL_CERT", cert)
            set(MYSQL_OPT_SSL_KEY, "MYSQL_OPT_SSL_KEY", key)
        }
        set(MYSQL_OPT_SSL_ENFORCE, "MYSQL_OPT_SSL_ENFORCE", &yes)
        set(MYSQL_OPT_SSL_VERIFY_SERVER_CERT, "MYSQL_OPT_SSL_VERIFY_SERVER_CERT", &yes)
        set(MARIADB_OPT_TLS_VERSION, "MARIADB_OPT_TLS_VERSION", "TLSv1.2,TLSv1.3")
        guard refused.isEmpty else {
            throw DatabaseError(kind: .unavailable, detail: "TLS options refused by Connector/C: \(refused.joined(separator: ", "))")
        }
    }

    func withMySQL<R, E: Error>(_ body: (UnsafeMutablePointer<MYSQL>) throws(E) -> R) throws(E) -> R {
        try body(mysql)
    }

    /// Whether the server's reply to the last command said a transaction is open on this
    /// session (`SERVER_STATUS_IN_TRANS` of its OK or EOF packet; no round trip).
    var serverReportsOpenTransaction: Bool {
        cmariadb_server_status(mysql) & UInt32(SERVER_STATUS_IN_TRANS) != 0
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
        return DatabaseError(
            kind: kind(forErrno: errno), errno: errno,
            sqlState: mysql_sqlstate(mysql).map { String(cString: $0) } ?? "HY000",
            detail: operation, serverMessage: mysql_error(mysql).map { String(cString: $0) }, sql: sql)
    }
}
