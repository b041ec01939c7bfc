import Glibc

/// `billing-rpc doctor`: one line per piece an installation needs, ✓ or ✗ with the fix, and
/// an exit status for scripts and monitoring (0 when every check passes, 1 otherwise).
/// Reads only: it changes nothing it looks at.
struct Doctor {
    struct Check: Sendable, Equatable {
        var name: String
        var ok: Bool
        var detail: String
        /// What to do when it fails.
        var fix: String?

        var line: String { ok ? "✓ \(name): \(detail)" : "✗ \(name): \(detail)" + (fix.map { " — fix: \($0)" } ?? "") }
        var json: JSON {
            ["check": .string(name), "ok": .bool(ok), "detail": .string(detail), "fix": fix.map(JSON.string) ?? .null]
        }
    }

    var configPath: String?
    var environment: [String: String]
    var sqlDirectory: String
    /// nginx's base URL (`http://127.0.0.1:8080`): the health route is asked through it.
    var url: String?
    var now: Timestamp = SystemClock().now()
    /// A key or root expiring sooner than this is a failure (rotate before it does).
    var expiryWarningSeconds: Int64 = 14 * 86_400
    var maxClockSkewMilliseconds: Int64 = 2_000
    var minimumFreeBytes: UInt64 = 1 << 30

    func run() -> [Check] {
        var checks: [Check] = []
        let configuration: BillingConfiguration
        do {
            configuration = try BillingConfiguration.load(path: configPath, environment: environment)
            checks.append(Check(name: "configuration", ok: true, detail: "\(configPath ?? "(defaults)") is valid", fix: nil))
        } catch {
            checks.append(
                Check(
                    name: "configuration", ok: false, detail: "\(error)",
                    fix: "correct each key listed, then run the doctor again"))
            return checks
        }
        checks.append(secretFiles())
        let db = DatabaseConnection(configuration: configuration.database)
        defer { db.close() }
        let reachable = database(db)
        checks.append(reachable)
        if reachable.ok {
            checks.append(grants(db))
            checks.append(migrations(db))
            checks.append(clock(db))
            checks.append(diskSpace(db))
            checks.append(webhookEndpoints(configuration.webhooks, db))
            if configuration.google.isAPIConfigured { checks.append(playAcknowledgements(db)) }
        }
        checks.append(workers(configuration))
        if let url { checks.append(throughNginx(url)) }
        checks.append(liveChanges(configuration.live))
        checks.append(tokenKeys(configuration))
        checks.append(appleRoots(configuration))
        if configuration.apple.serverApi.isConfigured { checks.append(appStoreKey(configuration)) }
        checks.append(entitlementKeys(configuration.entitlements))
        checks.append(offerKey(configuration.apple))
        return checks
    }

    // MARK: - Files

    /// Every `…File` setting of a secret: it exists, this process can read it, and neither
    /// its group nor others can write it, nor others read it.
    func secretFiles() -> Check {
        guard let document = try? BillingConfiguration.document(path: configPath, environment: environment) else {
            return Check(name: "secret files", ok: false, detail: "the configuration cannot be read", fix: nil)
        }
        var files: [(key: String, path: String)] = []
        func walk(_ object: JSONObject, _ prefix: String) {
            for (key, value) in object {
                if case .object(let inner) = value {
                    walk(inner, prefix + key + ".")
                    continue
                }
                if key == "signingKeyFiles", let paths = value.arrayValue {
                    for (index, path) in paths.enumerated() {
                        if let path = path.stringValue { files.append((prefix + key + "[\(index)]", path)) }
                    }
                    continue
                }
                if key.hasSuffix("File"), let path = value.stringValue,
                    ["password", "webhookSecret", "previousWebhookSecret", "privateKey", "key"].contains(String(key.dropLast(4)))
                {
                    files.append((prefix + key, path))
                }
            }
        }
        walk(document, "")
        guard !files.isEmpty else { return Check(name: "secret files", ok: true, detail: "no secret is read from a file", fix: nil) }
        var problems: [String] = []
        var fixes: [String] = []
        for (key, path) in files.sorted(by: { $0.key < $1.key }) {
            var info = stat()
            guard stat(path, &info) == 0 else {
                problems.append("\(key) \(path) does not exist")
                fixes.append("write \(path) (mode 0600)")
                continue
            }
            if access(path, R_OK) != 0 {
                problems.append("\(key) \(path) is not readable by uid \(getuid())")
                fixes.append("run as the service's user, or chown that user \(path)")
            }
            let mode = info.st_mode & 0o777
            if mode & 0o027 != 0 {
                problems.append("\(key) \(path) has mode \(String(mode, radix: 8)) (others or the group may read or write it)")
                fixes.append("chmod 0600 \(path)")
            }
        }
        if problems.isEmpty {
            return Check(name: "secret files", ok: true, detail: "\(files.count) readable here and by no one else", fix: nil)
        }
        return Check(name: "secret files", ok: false, detail: problems.joined(separator: "; "), fix: fixes.joined(separator: "; "))
    }

    // MARK: - Database

    func database(_ db: DatabaseConnection) -> Check {
        do {
            let row = try db.queryOne("SELECT CURRENT_USER() AS account, VERSION() AS version")
            return Check(
                name: "database", ok: true,
                detail: "reachable as \(try row?.string("account") ?? "?") (MariaDB \(try row?.string("version") ?? "?"))", fix: nil)
        } catch {
            return Check(
                name: "database", ok: false, detail: "cannot connect: \(error.debugDescription)",
                fix: "check database.host/port/socket, the account and its password file; is MariaDB up?")
        }
    }

    /// The runtime account has the DML it needs on the database and no more (SPEC §13).
    func grants(_ db: DatabaseConnection) -> Check {
        do {
            let name = try db.queryOne("SELECT DATABASE() AS name")?.optionalString("name") ?? "billing"
            let lines = try db.query("SHOW GRANTS").map { (row) throws(DatabaseError) -> String in
                try row.string(row.columns.names.first ?? "")
            }
            let text = lines.joined(separator: "\n").uppercased()
            let onDatabase = lines.filter { $0.uppercased().contains("ON `\(name.uppercased())`.*") || $0.uppercased().contains("ON *.*") }
                .joined(separator: "\n").uppercased()
            let needed = ["SELECT", "INSERT", "UPDATE", "DELETE"]
            let missing = needed.filter { !onDatabase.contains($0) && !onDatabase.contains("ALL PRIVILEGES") }
            let excess = ["ALL PRIVILEGES", "CREATE", "DROP", "ALTER", "GRANT OPTION", "SUPER", "TRIGGER"]
                .filter { text.contains($0) }
            if !missing.isEmpty {
                return Check(
                    name: "database grants", ok: false, detail: "the account lacks \(missing.joined(separator: ", ")) on `\(name)`",
                    fix: "GRANT SELECT, INSERT, UPDATE, DELETE ON \(name).* TO the runtime account")
            }
            if !excess.isEmpty {
                return Check(
                    name: "database grants", ok: false,
                    detail: "the runtime account may change the schema (\(excess.joined(separator: ", ")))",
                    fix: "use the DML-only account for the daemons and the migrator account for migrations (docs/operations.md, Database accounts)")
            }
            return Check(name: "database grants", ok: true, detail: "SELECT, INSERT, UPDATE, DELETE on `\(name)` and no DDL", fix: nil)
        } catch {
            return Check(name: "database grants", ok: false, detail: "cannot read the grants: \(error)", fix: nil)
        }
    }

    func migrations(_ db: DatabaseConnection) -> Check {
        do {
            let status = try Migrator(directory: sqlDirectory).status(using: db)
            var pending: [String] = []
            var changed: [String] = []
            var missing: [String] = []
            for entry in status {
                switch entry.state {
                case .applied: break
                case .pending: pending.append("\(entry.version)")
                case .checksumMismatch: changed.append("\(entry.version) \(entry.name)")
                case .missingFile: missing.append("\(entry.version) \(entry.name)")
                }
            }
            if !changed.isEmpty {
                return Check(
                    name: "migrations", ok: false, detail: "applied files changed since: \(changed.joined(separator: ", "))",
                    fix: "restore the files as applied (git checkout); a change is a new migration")
            }
            if !pending.isEmpty {
                return Check(
                    name: "migrations", ok: false, detail: "\(pending.count) pending (\(pending.joined(separator: ", ")))",
                    fix: "billing-rpc migrate as the migrator account (systemctl restart billing-rpc does it)")
            }
            if !missing.isEmpty {
                return Check(
                    name: "migrations", ok: false, detail: "applied but not in \(sqlDirectory): \(missing.joined(separator: ", "))",
                    fix: "install this release's sql/ directory (the binaries are older than the database?)")
            }
            return Check(name: "migrations", ok: true, detail: "\(status.count) applied, checksums intact", fix: nil)
        } catch {
            return Check(name: "migrations", ok: false, detail: "\(error)", fix: "check --sql-dir and the database")
        }
    }

    func clock(_ db: DatabaseConnection) -> Check {
        do {
            let before = SystemClock().now()
            guard let row = try db.queryOne("SELECT UNIX_TIMESTAMP(NOW(3)) * 1000 AS ms") else { throw DatabaseError.misuse("no row") }
            let after = SystemClock().now()
            let server = Int64(try row.double("ms"))
            let local = (before.millisecondsSinceEpoch + after.millisecondsSinceEpoch) / 2
            let skew = server - local
            if abs(skew) > maxClockSkewMilliseconds {
                return Check(
                    name: "clock", ok: false, detail: "this host and the database differ by \(skew) ms",
                    fix: "run NTP (systemd-timesyncd or chrony) on both hosts")
            }
            return Check(name: "clock", ok: true, detail: "within \(abs(skew)) ms of the database", fix: nil)
        } catch {
            return Check(name: "clock", ok: false, detail: "cannot read the database's clock: \(error)", fix: nil)
        }
    }

    /// Free space where MariaDB keeps its data, when that directory is on this host.
    func diskSpace(_ db: DatabaseConnection) -> Check {
        guard let datadir = try? db.queryOne("SELECT @@datadir AS dir")?.string("dir") else {
            return Check(name: "disk space", ok: true, detail: "the datadir is not readable here (a remote database)", fix: nil)
        }
        var info = statvfs()
        guard statvfs(datadir, &info) == 0 else {
            return Check(name: "disk space", ok: true, detail: "\(datadir) is not on this host", fix: nil)
        }
        let free = UInt64(info.f_bavail) * UInt64(info.f_frsize)
        let total = UInt64(info.f_blocks) * UInt64(info.f_frsize)
        let percent = total == 0 ? 0 : Double(free) * 100 / Double(total)
        let text = "\(free >> 20) MiB free of \(total >> 20) MiB (\(Int(percent)) %) in \(datadir)"
        if free < minimumFreeBytes || percent < 10 {
            return Check(name: "disk space", ok: false, detail: text, fix: "free space or grow the volume before MariaDB stops writing")
        }
        return Check(name: "disk space", ok: true, detail: text, fix: nil)
    }

    // MARK: - Processes

    func workers(_ configuration: BillingConfiguration) -> Check {
        let directory = MetricsDirectory.of(configuration)
        let live = directory.readAll(now: now)
        guard !live.isEmpty else {
            return Check(
                name: "workers", ok: false, detail: "no worker published its state in \(directory.path) lately",
                fix: "systemctl start billing-fcgi@1.socket billing-fcgi@1 (and the others); journalctl -u 'billing-fcgi@*'")
        }
        let names = live.map { "\($0.worker) (pid \($0.pid), \($0.threads) threads)" }.sorted()
        return Check(name: "workers", ok: true, detail: "\(live.count) up: \(names.joined(separator: ", "))", fix: nil)
    }

    func throughNginx(_ base: String) -> Check {
        var client = CurlHTTPClient(timeoutMilliseconds: 5_000, connectTimeoutMilliseconds: 2_000, caFile: nil)
        client.allowsPlainHTTP = true
        client.followsRedirects = true
        let url = base.hasSuffix("/") ? base + "api/v1/health" : base + "/api/v1/health"
        do {
            let response = try client.get(url, headers: [])
            let body = (try? JSON.parse(response.body)) ?? .null
            guard response.status == 200, body["database"]?.stringValue == "ok" else {
                return Check(
                    name: "through nginx", ok: false, detail: "\(url) answered \(response.status)",
                    fix: "nginx -t; is the site enabled and its upstream naming the worker sockets?")
            }
            return Check(name: "through nginx", ok: true, detail: "\(url) answers, database ok", fix: nil)
        } catch {
            return Check(name: "through nginx", ok: false, detail: "\(url): \(error)", fix: "systemctl status nginx; nginx -t")
        }
    }

    // MARK: - Announcing changes

    /// A pending delivery older than this, or an outbox row not fanned out for longer, is
    /// a failure: an endpoint down for an hour, or no dispatcher running.
    static let maxWebhookLagSeconds: Int64 = 3_600
    static let maxOutboxQueuedSeconds: Int64 = 300

    /// The configured webhook endpoints: none failed for good, none an hour behind, and the
    /// outbox fanned out (a billing-rpc with these endpoints is running). Read from the same
    /// database gauges `/metrics` serves.
    func webhookEndpoints(_ webhooks: BillingConfiguration.Webhooks, _ db: DatabaseConnection) -> Check {
        let name = "webhook endpoints"
        let samples = DatabaseGauges.samples(db, now: now)
        guard samples.contains(where: { $0.name == "billing_database_gauges_up" && $0.value == 1 }) else {
            return Check(name: name, ok: false, detail: "cannot read the deliveries", fix: nil)
        }
        func gauge(_ metric: String, _ endpoint: String) -> Int64? {
            samples.first { $0.name == metric && $0.labels.contains { $0 == ("endpoint", endpoint) } }.map { Int64($0.value) }
        }
        guard !webhooks.endpoints.isEmpty else {
            return Check(name: name, ok: true, detail: "none configured (webhooks.endpoints)", fix: nil)
        }
        var parts: [String] = []
        var problems: [String] = []
        var fixes: [String] = []
        for endpoint in webhooks.endpoints {
            guard let lag = gauge("billing_webhook_lag_seconds", endpoint.id) else {
                parts.append("\(endpoint.id) up to date")
                continue
            }
            let failed = gauge("billing_webhook_failed", endpoint.id) ?? 0
            parts.append("\(endpoint.id) \(gauge("billing_webhook_retrying", endpoint.id) ?? 0) retrying, \(failed) failed, lag \(lag) s")
            if failed > 0 {
                problems.append("\(endpoint.id): \(failed) failed for good")
                fixes.append("billing-admin webhooks.deliveries --endpointId \(endpoint.id) --status failed, then webhooks.replay")
            }
            if lag > Self.maxWebhookLagSeconds {
                problems.append("\(endpoint.id): its oldest pending delivery waits \(lag) s")
                fixes.append("is \(endpoint.url) up? billing-admin webhooks.list shows its last error")
            }
        }
        if let queued = samples.first(where: { $0.name == "billing_outbox_queued_seconds" }).map({ Int64($0.value) }),
            queued > Self.maxOutboxQueuedSeconds
        {
            problems.append("the outbox's oldest change waits \(queued) s to be fanned out")
            fixes.append("start billing-rpc with these webhooks.endpoints (systemctl status billing-rpc)")
        }
        guard problems.isEmpty else {
            return Check(name: name, ok: false, detail: problems.joined(separator: "; "), fix: fixes.joined(separator: "; "))
        }
        return Check(name: name, ok: true, detail: parts.joined(separator: "; "), fix: nil)
    }

    /// Google refunds a Play purchase left unacknowledged three days after it started: none
    /// may be within a day of that limit (the sweeper acknowledges them, retrying every
    /// `reconcile.intervalSeconds`). Read from the database gauges `/metrics` serves.
    func playAcknowledgements(_ db: DatabaseConnection) -> Check {
        let name = "play acknowledgements"
        let samples = DatabaseGauges.samples(db, now: now)
        guard let waiting = samples.first(where: { $0.name == "billing_google_unacknowledged" }).map({ Int64($0.value) }),
            let deadline = samples.first(where: { $0.name == "billing_google_acknowledgement_deadline_seconds" }).map({ Int64($0.value) })
        else {
            return Check(name: name, ok: false, detail: "cannot read billing_google_purchases", fix: nil)
        }
        guard waiting > 0 else { return Check(name: name, ok: true, detail: "every paid Play purchase is acknowledged", fix: nil) }
        let hours = deadline / 3600
        guard deadline < 86_400 else {
            return Check(
                name: name, ok: true, detail: "\(waiting) to acknowledge; the nearest reaches Google's three-day limit in \(hours) h",
                fix: nil)
        }
        return Check(
            name: name, ok: false,
            detail: deadline > 0
                ? "\(waiting) unacknowledged; one reaches Google's three-day limit in \(hours) h (Google then refunds it)"
                : "\(waiting) unacknowledged; one passed Google's three-day limit (Google refunds it)",
            fix:
                "is billing-rpc's sweeper running (reconcile.sweepEverySeconds)? billing_google_purchases.ack_error says why; "
                + "billing-admin google.purchases.acknowledge acknowledges one by hand")
    }

    /// Live changes: nchan answers on `live.publisherSocket` (or live changes are off).
    func liveChanges(_ live: BillingConfiguration.Live) -> Check {
        guard let publisher = LivePublisherSocket(live) else {
            return Check(
                name: "live changes", ok: true, detail: "off (live.publisherSocket unset): apps poll GET /billing/access", fix: nil)
        }
        do {
            let status = try publisher.status()
            return Check(
                name: "live changes", ok: true,
                detail: "nchan answers on \(publisher.path): \(status.channels) channels, \(status.subscribers) apps waiting", fix: nil)
        } catch {
            return Check(
                name: "live changes", ok: false, detail: "\(publisher.path): \(error)",
                fix: "nginx -t; is libnginx-mod-nchan installed and the site's publisher server listening on \(publisher.path)?")
        }
    }
}
