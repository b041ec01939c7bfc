/// Where and how to reach MariaDB (config keys `database.*`).
struct DatabaseConfiguration: Sendable, Equatable {
    /// TCP host; ignored when `socket` is set.
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

    init(host: String = "127.0.0.1", port: Int = 3306, socket: String? = nil, user: String = "billing",
                password: String = "", name: String = "billing", connectTimeoutSeconds: Int = 2,
                readTimeoutSeconds: Int = 10, writeTimeoutSeconds: Int = 10, lockWaitTimeoutSeconds: Int = 5) {
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
    }
}
