import Foundation
import Glibc
import Testing

@testable import Core

/// `database.tls` against the test MariaDB's TCP port, which scripts/lib/stack.sh starts with
/// TLS (`--ssl-ca/--ssl-cert/--ssl-key` from `$BILLING_VAR_DIR/secrets/db-tls`): the server's
/// certificate is signed by `ca.pem` and names `DNS:localhost` only, so at `localhost` it
/// verifies and at `127.0.0.1` its name does not match; `unrelated-ca.pem` signed nothing the
/// server has. Each test makes its own TCP accounts (from 127.0.0.1, the address the server
/// sees) through the root socket connection, and drops them afterwards.
@Suite struct DatabaseTLSTests {
    struct Setup {
        let port: Int
        let tlsDirectory: String
        /// The test database, reached as root over the socket.
        let database: DatabaseConfiguration

        func tls(ca: String = "ca.pem", clientCertificate: Bool = false) -> DatabaseConfiguration.TLS {
            DatabaseConfiguration.TLS(
                caFile: "\(tlsDirectory)/\(ca)",
                certFile: clientCertificate ? "\(tlsDirectory)/client-cert.pem" : nil,
                keyFile: clientCertificate ? "\(tlsDirectory)/client-key.pem" : nil)
        }

        /// `account` over TCP to `host`.
        func tcp(_ account: Account, host: String, tls: DatabaseConfiguration.TLS?) -> DatabaseConfiguration {
            DatabaseConfiguration(
                host: host, port: port, user: account.user, password: account.password, name: database.name,
                connectTimeoutSeconds: 2, readTimeoutSeconds: 30, writeTimeoutSeconds: 30, tls: tls)
        }
    }

    struct Account {
        let user: String
        let password: String
    }

    /// A fresh database and an account on it for each `REQUIRE` clause (`""`: none).
    private func withAccounts(_ requirements: [String], _ body: (Setup, [Account]) throws -> Void) throws {
        let portMeaning = "TCP port of the private test MariaDB (on 127.0.0.1)"
        guard let port = Int(try TestEnvironment.required("BILLING_TEST_DB_PORT", portMeaning)) else {
            throw TestEnvironment.Missing(variable: "BILLING_TEST_DB_PORT", meaning: portMeaning + ", a number")
        }
        let tlsDirectory = try TestEnvironment.required("BILLING_TEST_DB_TLS_DIR", "the test MariaDB's TLS files (scripts/lib/stack.sh db_tls_files)")
        try withTestDatabase { configuration, _ in
            let root = DatabaseConnection(configuration: configuration)
            var accounts: [Account] = []
            defer {
                for account in accounts { _ = try? root.execute(SQLQuery(unsafeSQL: "DROP USER IF EXISTS '\(account.user)'@'127.0.0.1'")) }
            }
            for requirement in requirements {
                // Generated hex: safe to write into the statement (CREATE USER takes no placeholders for these).
                let account = Account(
                    user: "it_tls_" + String(UInt64.random(in: 0...UInt64.max), radix: 16),
                    password: String(UInt64.random(in: 0...UInt64.max), radix: 16))
                try root.execute(
                    SQLQuery(
                        unsafeSQL: "CREATE USER '\(account.user)'@'127.0.0.1' IDENTIFIED BY '\(account.password)'"
                            + (requirement.isEmpty ? "" : " REQUIRE \(requirement)")))
                accounts.append(account)
                try root.execute(SQLQuery(unsafeSQL: "GRANT SELECT, INSERT, CREATE ON `\(configuration.name)`.* TO '\(account.user)'@'127.0.0.1'"))
            }
            try body(Setup(port: port, tlsDirectory: tlsDirectory, database: configuration), accounts)
        }
    }

    private func debug(_ error: DatabaseError?) -> String { error.map { String(reflecting: $0) } ?? "no error" }

    /// The session's TLS cipher, "" when it is not encrypted.
    private func cipher(_ db: DatabaseConnection) throws -> String {
        try db.queryOne("SELECT VARIABLE_VALUE AS v FROM information_schema.SESSION_STATUS WHERE VARIABLE_NAME = \("SSL_CIPHER")")?.string("v") ?? ""
    }

    /// The right CA, the name the certificate carries: an encrypted session (TLS 1.2 or
    /// later) on which the usual prepared statements work, for an account that `REQUIRE SSL`.
    @Test func theRightCAAndHostGiveAnEncryptedSession() throws {
        try withAccounts(["SSL"]) { setup, accounts in
            let db = DatabaseConnection(configuration: setup.tcp(accounts[0], host: "localhost", tls: setup.tls()))
            try db.ping()
            #expect(try !cipher(db).isEmpty)
            let version = try db.queryOne("SELECT VARIABLE_VALUE AS v FROM information_schema.SESSION_STATUS WHERE VARIABLE_NAME = \("SSL_VERSION")")?
                .string("v")
            #expect(version == "TLSv1.3" || version == "TLSv1.2", "\(version ?? "nil")")
            try db.execute("CREATE TABLE t (id INT PRIMARY KEY, v VARCHAR(16) NOT NULL)")
            try db.execute("INSERT INTO t VALUES (\(1), \("over tls"))")
            #expect(try db.queryOne("SELECT v FROM t WHERE id = \(1)")?.string("v") == "over tls")
        }
    }

    /// A CA that did not sign the server's certificate: no connection, a TLS error that says why.
    @Test func aServerCertificateFromAnotherCAIsRefused() throws {
        try withAccounts([""]) { setup, accounts in
            let db = DatabaseConnection(configuration: setup.tcp(accounts[0], host: "localhost", tls: setup.tls(ca: "unrelated-ca.pem")))
            let error = #expect(throws: DatabaseError.self) { try db.ping() }
            #expect(error?.errno == 2026, "CR_SSL_CONNECTION_ERROR: \(debug(error))")
            #expect(error?.isUnavailable == true)
            #expect(error?.description == "database error: database unavailable (connect over TLS)")
            #expect(error?.debugDescription.contains("certificate") == true, "\(debug(error))")
            #expect(!db.isConnected)
        }
    }

    /// The right CA but a host the certificate does not name (it names `localhost`, not
    /// `127.0.0.1`): refused, although the chain verifies.
    @Test func aHostTheCertificateDoesNotNameIsRefused() throws {
        try withAccounts([""]) { setup, accounts in
            let db = DatabaseConnection(configuration: setup.tcp(accounts[0], host: "127.0.0.1", tls: setup.tls()))
            let error = #expect(throws: DatabaseError.self) { try db.ping() }
            #expect(error?.errno == 2026, "CR_SSL_CONNECTION_ERROR: \(debug(error))")
            #expect(
                error?.debugDescription.contains("Validation of SSL server certificate failed") == true,
                "\(debug(error))")
            #expect(!db.isConnected)
        }
    }

    /// `certFile`/`keyFile` are presented: an account that requires exactly that certificate
    /// gets in with them and is refused without them.
    @Test func theClientCertificateIsPresented() throws {
        try withAccounts(["SUBJECT '/CN=billing test client' AND ISSUER '/CN=FCGIBilling test database CA'"]) { setup, accounts in
            let db = DatabaseConnection(configuration: setup.tcp(accounts[0], host: "localhost", tls: setup.tls(clientCertificate: true)))
            try db.ping()
            #expect(try !cipher(db).isEmpty)

            let without = DatabaseConnection(configuration: setup.tcp(accounts[0], host: "localhost", tls: setup.tls()))
            let error = #expect(throws: DatabaseError.self) { try without.ping() }
            #expect(error?.errno == 1045, "access denied: \(debug(error))")
        }
    }

    /// Without `database.tls` nothing changes: a plaintext TCP session as before (and the
    /// server-side `REQUIRE SSL` that docs/operations.md recommends refuses it).
    @Test func withoutTLSTheConnectionIsAsBefore() throws {
        try withAccounts(["", "SSL"]) { setup, accounts in
            let db = DatabaseConnection(configuration: setup.tcp(accounts[0], host: "127.0.0.1", tls: nil))
            try db.ping()
            #expect(try cipher(db) == "")

            let required = DatabaseConnection(configuration: setup.tcp(accounts[1], host: "127.0.0.1", tls: nil))
            let error = #expect(throws: DatabaseError.self) { try required.ping() }
            #expect(error?.errno == 1045, "access denied: \(debug(error))")
        }
    }

    /// A server (or a man in the middle) that offers no TLS: with `database.tls` the client
    /// gives up before sending anything, the user name included, instead of going on in
    /// plaintext. Without it, the same fake server gets the plaintext login: the control
    /// that shows the fake handshake is one the client accepts.
    @Test func aServerWithoutTLSGetsNothingInPlaintext() throws {
        let user = "it_tls_probe_user"
        let tlsDirectory = try TestEnvironment.required("BILLING_TEST_DB_TLS_DIR", "the test MariaDB's TLS files (scripts/lib/stack.sh db_tls_files)")
        for tls in [DatabaseConfiguration.TLS(caFile: "\(tlsDirectory)/ca.pem"), nil] {
            let server = try PlaintextOnlyServer()
            defer { server.close() }
            let received = onThread { server.serveOne() }
            let db = DatabaseConnection(
                configuration: DatabaseConfiguration(
                    host: "127.0.0.1", port: Int(server.port), user: user, password: "not-a-secret", name: "",
                    connectTimeoutSeconds: 2, readTimeoutSeconds: 5, writeTimeoutSeconds: 5, tls: tls))
            let error = #expect(throws: DatabaseError.self) { try db.ping() }
            let bytes = try received()
            let sentUser =
                bytes.count >= user.utf8.count
                && (0...(bytes.count - user.utf8.count)).contains { Array(bytes[$0..<($0 + user.utf8.count)]) == Array(user.utf8) }
            if tls != nil {
                #expect(error?.errno == 2026, "CR_SSL_CONNECTION_ERROR: \(debug(error))")
                #expect(!sentUser, "the login went out in plaintext")
            } else {
                #expect(sentUser, "control: a client without TLS logs in to the fake server (\(bytes.count) bytes)")
            }
        }
    }
}

/// One TCP connection's worth of a MariaDB server that does not offer TLS: it sends a
/// protocol-10 handshake without CLIENT_SSL and returns the first packet the client sends
/// (nothing if the client hangs up first).
private struct PlaintextOnlyServer: Sendable {
    let listener: Int32
    let port: UInt16

    struct Failure: Error, CustomStringConvertible {
        let description: String
    }

    init() throws {
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        guard fd >= 0 else { throw Failure(description: "socket: \(errno)") }
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_port = 0
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        let bound = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
        }
        guard bound == 0, listen(fd, 1) == 0 else {
            Glibc.close(fd)
            throw Failure(description: "bind/listen: \(errno)")
        }
        // accept() gives up too, should the client never come.
        var timeout = timeval(tv_sec: 10, tv_usec: 0)
        setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        _ = withUnsafeMutablePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(fd, $0, &length) }
        }
        listener = fd
        port = UInt16(bigEndian: address.sin_port)
    }

    func close() { Glibc.close(listener) }

    func serveOne() -> [UInt8] {
        let connection = accept(listener, nil, nil)
        guard connection >= 0 else { return [] }
        defer { Glibc.close(connection) }
        var timeout = timeval(tv_sec: 5, tv_usec: 0)
        setsockopt(connection, SOL_SOCKET, SO_RCVTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
        let handshake = Self.handshake()
        _ = handshake.withUnsafeBytes { send(connection, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) }
        // The client's first packet: a 4-byte header (3-byte length, sequence) and its payload.
        var received: [UInt8] = []
        var chunk = [UInt8](repeating: 0, count: 4096)
        while received.count < 4 || received.count < 4 + Int(received[0]) + Int(received[1]) << 8 + Int(received[2]) << 16 {
            let n = chunk.withUnsafeMutableBytes { recv(connection, $0.baseAddress, $0.count, 0) }
            if n <= 0 { break }
            received += chunk[0..<n]
        }
        return received
    }

    /// Protocol 10: version, thread id, scramble, capabilities (protocol 4.1, secure and
    /// plugin authentication, transactions; no CLIENT_SSL), utf8mb4, autocommit,
    /// mysql_native_password.
    static func handshake() -> [UInt8] {
        let capabilities: UInt32 = 0x0001 | 0x0004 | 0x0008 | 0x0200 | 0x2000 | 0x8000 | 0x000F_0000
        var payload: [UInt8] = [10]
        payload += Array("5.5.5-10.11.0-MariaDB-fake".utf8) + [0]
        payload += [1, 0, 0, 0]
        payload += Array("abcdefgh".utf8) + [0]
        payload += [UInt8(capabilities & 0xFF), UInt8((capabilities >> 8) & 0xFF)]
        payload += [45, 2, 0]
        payload += [UInt8((capabilities >> 16) & 0xFF), UInt8((capabilities >> 24) & 0xFF)]
        payload += [21] + [UInt8](repeating: 0, count: 10)
        payload += Array("ijklmnopqrst".utf8) + [0]
        payload += Array("mysql_native_password".utf8) + [0]
        return [UInt8(payload.count & 0xFF), UInt8((payload.count >> 8) & 0xFF), 0, 0] + payload
    }
}
