import Foundation
import Testing

@testable import Core

/// What the integration tests need from the environment. Missing settings fail the test
/// with a message naming the variable: these tests never skip.
struct TestEnvironment {
    let socket: String
    let user: String
    let password: String
    let prefix: String

    struct Missing: Error, CustomStringConvertible {
        let variable: String
        let meaning: String
        var description: String {
            "integration tests need \(variable) (\(meaning)); run them through scripts/test or set it, see Tests/README.md"
        }
    }

    static func required(_ name: String, _ meaning: String) throws -> String {
        guard let value = ProcessInfo.processInfo.environment[name], !value.isEmpty else {
            throw Missing(variable: name, meaning: meaning)
        }
        return value
    }

    static func load() throws -> TestEnvironment {
        let env = ProcessInfo.processInfo.environment
        return TestEnvironment(
            socket: try required("BILLING_TEST_DB_SOCKET", "Unix socket of the private test MariaDB"),
            user: env["BILLING_TEST_DB_USER"].flatMap { $0.isEmpty ? nil : $0 } ?? "root",
            password: env["BILLING_TEST_DB_PASSWORD"] ?? "",
            prefix: env["BILLING_TEST_DB_NAME_PREFIX"].flatMap { $0.isEmpty ? nil : $0 } ?? "it_")
    }

    static func sqlDirectory() throws -> String {
        try required("BILLING_TEST_SQL_DIR", "path of the repository's sql/ directory")
    }

    func configuration(database: String, lockWaitTimeoutSeconds: Int = 5) -> DatabaseConfiguration {
        DatabaseConfiguration(
            socket: socket, user: user, password: password, name: database,
            connectTimeoutSeconds: 2, readTimeoutSeconds: 30, writeTimeoutSeconds: 30,
            lockWaitTimeoutSeconds: lockWaitTimeoutSeconds)
    }
}

/// Runs `body` against a database of its own (`it_<random>`), created for it and dropped
/// afterwards, so tests are independent and can run in parallel.
func withTestDatabase<T>(_ body: (_ configuration: DatabaseConfiguration, _ environment: TestEnvironment) throws -> T) throws -> T {
    let environment = try TestEnvironment.load()
    let name = environment.prefix + String(UInt64.random(in: 0...UInt64.max), radix: 16)
    let admin = DatabaseConnection(configuration: environment.configuration(database: ""))
    try admin.execute(SQLQuery(unsafeSQL: "CREATE DATABASE `\(name)` CHARACTER SET utf8mb4 COLLATE utf8mb4_unicode_ci"))
    defer {
        // Once more if the first attempt met a session lost to a server restart (the retry reconnects).
        let drop = SQLQuery(unsafeSQL: "DROP DATABASE IF EXISTS `\(name)`")
        if (try? admin.execute(drop)) == nil { _ = try? admin.execute(drop) }
    }
    return try body(environment.configuration(database: name), environment)
}

/// A connection to a fresh test database.
func withTestConnection<T>(_ body: (DatabaseConnection) throws -> T) throws -> T {
    try withTestDatabase { configuration, _ in try body(DatabaseConnection(configuration: configuration)) }
}

/// Runs `body` on a fresh database with every migration of `sql/` applied.
func withMigratedDatabase<T>(_ body: (DatabaseConnection) throws -> T) throws -> T {
    try withTestConnection { db in
        try migrateTestDatabase(db)
        return try body(db)
    }
}

/// Applies every migration of `sql/` to the fresh test database `db` is on. Migration 017
/// reads information_schema, and MariaDB refuses that read (1684, ER_WARN_I_S_SKIPPED_TABLE)
/// when another test is creating, migrating or dropping its own database at that moment: the
/// database is then made again, empty, and migrated afresh, up to 5 times. A billing server
/// migrates its one database, not dozens side by side.
func migrateTestDatabase(_ db: DatabaseConnection) throws {
    let directory = try TestEnvironment.sqlDirectory()
    let prefix = try TestEnvironment.load().prefix
    for attempt in 1...5 {
        let failure: DatabaseError
        do {
            _ = try Migrator(directory: directory).migrate(using: db)
            return
        } catch {
            failure = error
        }
        guard failure.errno == 1684, attempt < 5,
            let name = try db.queryOne("SELECT DATABASE() AS name")?.string("name"), name.hasPrefix(prefix)
        else { throw failure }
        try db.execute(SQLQuery(unsafeSQL: "DROP DATABASE `\(name)`"))
        try db.execute(SQLQuery(unsafeSQL: "CREATE DATABASE `\(name)` CHARACTER SET utf8mb4 COLLATE utf8mb4_unicode_ci"))
        try db.execute(SQLQuery(unsafeSQL: "USE `\(name)`"))
    }
}

/// Runs `body` on its own thread (connections are thread-confined and blocking) and
/// returns a function that waits for its result.
func onThread<T: Sendable>(_ body: @escaping @Sendable () throws -> T) -> () throws -> T {
    let done = DispatchSemaphore(value: 0)
    nonisolated(unsafe) var outcome: Result<T, any Error>?
    let thread = Thread {
        outcome = Result { try body() }
        done.signal()
    }
    thread.start()
    return {
        done.wait()
        return try outcome!.get()
    }
}
