/// Where and how to reach MariaDB (config keys `database.*`).
struct DatabaseConfiguration: Sendable, Equatable {
    /// TCP host; ignored when `socket` is set. With `tls`, the name (or IP address) the
    /// server's certificate must carry.
    var host: String
    var port: Int
    /// Unix socket path; preferred over TCP when set.
    var socket: String?
    var user: String
    var password: String
    var name: String
    var connectTimeoutSeconds: Int
    var readTimeoutSeconds: Int
    var writeTimeoutSeconds: Int
    /// Seconds InnoDB waits for a row lock before error 1205 (session `innodb_lock_wait_timeout`).
    var lockWaitTimeoutSeconds: Int
    /// TLS on the TCP connection (`database.tls`); nil: none, as over the socket.
    var tls: TLS?
    /// Whether the write path writes the outbox (`outbox.enabled`, set from there, not a
    /// `database` key): false, an installation that announces nothing saves its cost.
    var writesOutbox = true

    /// `database.tls`: the connection is encrypted and the server's certificate verified
    /// (its chain against `caFile`, and its name against `host`), or there is no connection:
    /// never a silent fall-back to plaintext. There is deliberately no switch to skip the
    /// verification.
    struct TLS: Sendable, Equatable {
        /// PEM file of the CA certificate(s) that signed the server's certificate.
        var caFile: String
        /// The client certificate (PEM) and its unencrypted key, for accounts that
        /// `REQUIRE X509`: both or neither.
        var certFile: String?
        var keyFile: String?

        init(caFile: String, certFile: String? = nil, keyFile: String? = nil) {
            self.caFile = caFile
            self.certFile = certFile
            self.keyFile = keyFile
        }
    }

    init(
        host: String = "127.0.0.1", port: Int = 3306, socket: String? = nil, user: String = "billing",
        password: String = "", name: String = "billing", connectTimeoutSeconds: Int = 2,
        readTimeoutSeconds: Int = 10, writeTimeoutSeconds: Int = 10, lockWaitTimeoutSeconds: Int = 5,
        tls: TLS? = nil
    ) {
        self.host = host
        self.port = port
        self.socket = socket
        self.user = user
        self.password = password
        self.name = name
        self.connectTimeoutSeconds = connectTimeoutSeconds
        self.readTimeoutSeconds = readTimeoutSeconds
        self.writeTimeoutSeconds = writeTimeoutSeconds
        self.lockWaitTimeoutSeconds = lockWaitTimeoutSeconds
        self.tls = tls
    }
}
