extension BillingConfiguration {
    /// Loads `path` (JSON), applies environment overrides, reads secret files and validates.
    ///
    /// Overrides: a variable `BILLING__section__key=value` sets `section.key` (the value is
    /// parsed as JSON when it parses, otherwise taken as a string), e.g.
    /// `BILLING__database__socket=/run/mysqld/mysqld.sock`. A secret may be given as a file:
    /// `database.passwordFile`, `revenuecat.webhookSecretFile`,
    /// `revenuecat.previousWebhookSecretFile` and `apple.serverApi.privateKeyFile` name a file
    /// whose content (without the trailing newline) is the value.
    static func load(path: String?, environment: [String: String]) throws(ConfigurationError) -> BillingConfiguration {
        try BillingConfiguration(json: .object(try document(path: path, environment: environment)))
    }

    /// The configuration document as the daemons read it: the file, with the environment's
    /// overrides applied, not yet validated (the doctor reads the secret files' paths here).
    static func document(path: String?, environment: [String: String]) throws(ConfigurationError) -> JSONObject {
        var root = JSONObject()
        if let path {
            let bytes: [UInt8]
            do { bytes = try FileIO.read(path, maxBytes: 4 << 20) } catch { throw ConfigurationError("\(error)") }
            do {
                guard case .object(let object) = try JSON.parse(bytes) else {
                    throw ConfigurationError("\(path): the configuration must be a JSON object")
                }
                root = object
            } catch let error as JSONError {
                throw ConfigurationError("\(path): \(error)")
            } catch {
                throw ConfigurationError("\(path): \(error)")
            }
        }
        for (name, value) in environment.sorted(by: { $0.key < $1.key }) where name.hasPrefix("BILLING__") {
            let keyPath = name.dropFirst("BILLING__".count).split(separator: "__", omittingEmptySubsequences: false).map(String.init)
            guard !keyPath.isEmpty, !keyPath.contains(where: \.isEmpty) else {
                throw ConfigurationError("environment \(name): expected BILLING__section__key")
            }
            let parsed = (try? JSON.parse(value)) ?? .string(value)
            root = root.setting(keyPath, to: parsed)
        }
        return root
    }

    /// Decodes and validates a configuration document.
    init(json: JSON) throws(ConfigurationError) {
        self.init()
        var reader = ConfigReader(json, path: "")
        reader.section("database") { r in
            r.string("host", into: &database.host)
            r.int("port", into: &database.port, range: 1...65_535)
            r.optionalString("socket", into: &database.socket)
            r.string("user", into: &database.user)
            r.secret("password", into: &database.password)
            r.string("name", into: &database.name)
            r.int("connectTimeoutSeconds", into: &database.connectTimeoutSeconds, range: 1...60)
            r.int("readTimeoutSeconds", into: &database.readTimeoutSeconds, range: 1...3600)
            r.int("writeTimeoutSeconds", into: &database.writeTimeoutSeconds, range: 1...3600)
            r.int("lockWaitTimeoutSeconds", into: &database.lockWaitTimeoutSeconds, range: 1...3600)
            r.optionalSection("tls") { t in database.tls = t.databaseTLS() }
        }
        reader.section("server") { r in
            r.int("threadsPerWorker", into: &server.threadsPerWorker, range: 1...256)
            r.int("maxBodyBytes", into: &server.maxBodyBytes, range: 1024...(64 << 20))
            r.int("socketMode", into: &server.socketMode, range: 0...0o777)
            r.int("backlog", into: &server.backlog, range: 1...65_535)
            r.stringArray("webServerAddrs", into: &server.webServerAddrs)
            for address in server.webServerAddrs where !IPv4Address.isValid(address) {
                r.problem("webServerAddrs", "\"\(address)\" is not an IPv4 address (libfcgi checks IPv4 peers only)")
            }
            r.optionalString("metricsDirectory", into: &server.metricsDirectory)
            r.int("snapshotCacheUsers", into: &server.snapshotCacheUsers, range: 0...10_000_000)
        }
        reader.section("admin") { r in
            r.string("socket", into: &admin.socket)
            r.int("maxMessageBytes", into: &admin.maxMessageBytes, range: 1024...(64 << 20))
            r.int("maxBatchLength", into: &admin.maxBatchLength, range: 1...10_000)
            r.int("maxConnections", into: &admin.maxConnections, range: 1...1024)
            r.int("idleTimeoutSeconds", into: &admin.idleTimeoutSeconds, range: 1...86_400)
            r.userList("allowedUsers", into: &admin.allowedUsers)
        }
        reader.section("log") { r in
            r.optionalString("file", into: &log.file)
            r.enumeration("level", into: &log.level)
        }
        reader.section("auth") { r in
            r.optionalString("keysFile", into: &auth.keysFile)
            r.optionalString("keysUrl", into: &auth.keysUrl)
            r.optionalString("caFile", into: &auth.caFile)
            r.int("keysTimeoutSeconds", into: &auth.keysTimeoutSeconds, range: 1...60)
            r.int("keysDefaultMaxAgeSeconds", into: &auth.keysDefaultMaxAgeSeconds, range: 1...604_800)
            r.int("keysMinRefreshSeconds", into: &auth.keysMinRefreshSeconds, range: 1...3600)
            if let url = auth.keysUrl, !url.hasPrefix("https://") || url.utf8.count < 9 {
                r.problem("keysUrl", "expected an https:// URL")
            }
            r.optionalString("issuer", into: &auth.issuer)
            r.optionalString("audience", into: &auth.audience)
            r.int("leewaySeconds", into: &auth.leewaySeconds, range: 0...3600)
        }
        reader.section("revenuecat") { r in
            var secret: String? = revenuecat.webhookSecret
            r.optionalSecret("webhookSecret", into: &secret)
            revenuecat.webhookSecret = secret
            var previous: String? = revenuecat.previousWebhookSecret
            r.optionalSecret("previousWebhookSecret", into: &previous)
            revenuecat.previousWebhookSecret = previous
            r.optionalSecret("apiKey", into: &revenuecat.apiKey)
            r.string("apiUrl", into: &revenuecat.apiUrl)
            r.clientSettings(into: &revenuecat.client)
            if !revenuecat.apiUrl.hasPrefix("https://") || revenuecat.apiUrl.utf8.count < 9 {
                r.problem("apiUrl", "expected an https:// URL")
            }
            if let tiers = r.take("entitlementTiers") {
                if case .array(let rules) = tiers {
                    var parsed: [(match: String, tier: Tier)] = []
                    for (index, rule) in rules.enumerated() {
                        if let match = rule["match"]?.stringValue, !match.isEmpty,
                            let tier = rule["tier"]?.stringValue.flatMap(Tier.init(rawValue:)), tier != .free
                        {
                            parsed.append((match.lowercased(), tier))
                        } else {
                            r.problem("entitlementTiers[\(index)]", "expected {\"match\": string, \"tier\": \"plus\"|\"pro\"}")
                        }
                    }
                    revenuecat.entitlementTiers = parsed
                } else {
                    r.problem("entitlementTiers", "expected an array")
                }
            }
        }
        reader.section("apple") { r in
            r.stringArray("trustedRootsFiles", into: &apple.trustedRootsFiles)
            r.optionalString("bundleId", into: &apple.bundleId)
            if let value = r.take("appAppleId"), !value.isNull {
                if let id = value.int64Value, id > 0 { apple.appAppleId = id } else { r.problem("appAppleId", "expected a positive integer") }
            }
            r.stringArray("environments", into: &apple.environments)
            // Any spelling (production, Production, PRODUCTION), kept as Apple writes it.
            apple.environments = apple.environments.map { name in
                switch name.lowercased() {
                case "production": return "Production"
                case "sandbox": return "Sandbox"
                default: return name
                }
            }
            for environment in apple.environments where environment != "Production" && environment != "Sandbox" {
                r.problem("environments", "unknown environment \"\(environment)\" (Production, Sandbox)")
            }
            r.section("serverApi") { r in
                r.optionalString("issuerId", into: &apple.serverApi.issuerId)
                r.optionalString("keyId", into: &apple.serverApi.keyId)
                r.optionalSecret("privateKey", into: &apple.serverApi.privateKey)
                r.string("productionUrl", into: &apple.serverApi.productionUrl)
                r.string("sandboxUrl", into: &apple.serverApi.sandboxUrl)
                r.clientSettings(into: &apple.serverApi.client)
                r.int("tokenLifetimeSeconds", into: &apple.serverApi.tokenLifetimeSeconds, range: 60...3600)
                for (name, url) in [("productionUrl", apple.serverApi.productionUrl), ("sandboxUrl", apple.serverApi.sandboxUrl)]
                where !url.hasPrefix("https://") || url.utf8.count < 9 {
                    r.problem(name, "expected an https:// URL")
                }
                let set = [apple.serverApi.issuerId, apple.serverApi.keyId, apple.serverApi.privateKey].filter { !($0 ?? "").isEmpty }
                if !set.isEmpty && set.count != 3 {
                    r.problem("privateKey", "set issuerId, keyId and privateKey (or privateKeyFile) together")
                }
            }
        }
        if let value = reader.take("products") {
            if case .object(let entries) = value {
                for (productId, entry) in entries {
                    let tier = entry["tier"]?.stringValue.flatMap(Tier.init(rawValue:))
                    let cadence = entry["cadence"]?.stringValue.flatMap(Cadence.init(rawValue:))
                    let durationText = entry["duration"]?.stringValue
                    let duration = durationText.flatMap(CatalogDuration.init)
                    let path = "products.\(productId)"
                    if let cadence, cadence == .consumable ? (tier == nil || tier != .free) : (tier != nil && tier != .free) {
                        if cadence == .nonRenewing && duration == nil {
                            reader.problem(path, "a non_renewing product needs \"duration\": an ISO-8601 duration such as \"P1M\"")
                        } else if cadence != .nonRenewing && entry["duration"] != nil {
                            reader.problem(path, "\"duration\" is only for non_renewing products")
                        } else {
                            products[productId] = Product(tier: tier, cadence: cadence, duration: duration)
                        }
                    } else {
                        reader.problem(
                            path,
                            "expected {\"tier\": \"plus\"|\"pro\", \"cadence\": \(Cadence.allCases.map { "\"\($0.rawValue)\"" }.joined(separator: "|"))} (\"duration\" with non_renewing; no tier needed for a consumable)"
                        )
                    }
                }
            } else {
                reader.problem("products", "expected an object {productId: {tier, cadence}}")
            }
        }
        reader.section("binding") { r in r.enumeration("policy", into: &binding.policy) }
        reader.section("users") { r in
            r.string("idPattern", into: &users.idPattern)
            if UserIdPattern(users.idPattern) == nil { r.problem("idPattern", "not a valid POSIX extended regular expression") }
        }
        reader.section("reporting") { r in
            r.string("currency", into: &reporting.currency)
            if reporting.currency.utf8.count != 3 || !reporting.currency.allSatisfy(\.isUppercase) {
                r.problem("currency", "expected an ISO 4217 code such as EUR")
            }
        }
        reader.section("reconcile") { r in
            r.int("afterSeconds", into: &reconcile.afterSeconds, range: 0...(30 * 86_400))
            r.int("intervalSeconds", into: &reconcile.intervalSeconds, range: 1...86_400)
            r.int("batchSize", into: &reconcile.batchSize, range: 1...10_000)
            r.int("endingWithinSeconds", into: &reconcile.endingWithinSeconds, range: 0...(30 * 86_400))
            r.int("sweepEverySeconds", into: &reconcile.sweepEverySeconds, range: 0...86_400)
            r.int("maxBackoffSeconds", into: &reconcile.maxBackoffSeconds, range: 1...(7 * 86_400))
        }
        reader.section("webhooks") { r in
            r.clientSettings(into: &webhooks.client)
            r.int("retentionDays", into: &webhooks.retentionDays, range: 4...3650)
            r.webhookEndpoints(into: &webhooks.endpoints)
        }
        reader.rejectUnknownKeys()
        if database.socket == nil && database.host.isEmpty { reader.problem("database", "set socket or host") }
        if database.tls != nil && database.socket != nil {
            // The socket would win and nothing would be encrypted: say so instead.
            reader.problem("database.tls", "TLS is for TCP: remove database.socket (set it to null) and set database.host, or remove database.tls")
        }
        if !reader.problems.isEmpty { throw ConfigurationError(problems: reader.problems) }
    }
}

extension JSONObject {
    /// A copy with the value at `path` replaced, creating intermediate objects.
    /// `path` set to `value`. A secret and its file form are one setting (`x` and `xFile`):
    /// setting one removes the other, so a later layer (an overlay, an environment
    /// variable) replaces an earlier one's choice instead of contradicting it.
    func setting(_ path: [String], to value: JSON) -> JSONObject {
        var copy = self
        guard let first = path.first else { return copy }
        if path.count == 1 {
            copy[first] = value
            copy[Self.twin(of: first)] = nil
        } else {
            let child = copy[first]?.objectValue ?? JSONObject()
            copy[first] = .object(child.setting(Array(path.dropFirst()), to: value))
        }
        return copy
    }

    /// `overlay` deep-merged over this object: where both hold an object the two merge
    /// (recursively), anything else in `overlay` replaces this object's value and, as in
    /// `setting`, removes its twin (an overlay's `passwordFile` replaces a base `password`).
    /// What `billing-rpc config-merge` does to the generated configuration and
    /// `BILLING_CONFIG_OVERLAY` (scripts/lib/stack.sh).
    func deepMerging(_ overlay: JSONObject) -> JSONObject {
        var merged = self
        for (key, value) in overlay {
            if case .object(let inner) = value, case .object(let base)? = merged[key] {
                merged[key] = .object(base.deepMerging(inner))
            } else {
                merged = merged.setting([key], to: value)
            }
        }
        return merged
    }

    /// `xFile` for `x`, `x` for `xFile`.
    static func twin(of key: String) -> String {
        key.hasSuffix("File") && key.count > 4 ? String(key.dropLast(4)) : key + "File"
    }
}

/// Walks one configuration object, collecting problems (with full key paths) instead of
/// stopping at the first, and remembering which keys were read so unknown ones (typos)
/// are reported.
struct ConfigReader {
    private let object: JSONObject
    private let path: String
    private var consumed: Set<String> = []
    private(set) var problems: [String] = []

    init(_ json: JSON, path: String) {
        self.object = json.objectValue ?? JSONObject()
        self.path = path
        if json.objectValue == nil { problems.append("\(path.isEmpty ? "configuration" : path): expected an object") }
    }

    private func key(_ name: String) -> String { path.isEmpty ? name : "\(path).\(name)" }

    mutating func problem(_ name: String, _ message: String) { problems.append("\(key(name)): \(message)") }

    mutating func take(_ name: String) -> JSON? {
        consumed.insert(name)
        return object[name]
    }

    mutating func section(_ name: String, _ body: (inout ConfigReader) -> Void) {
        guard let value = take(name) else { return }
        var child = ConfigReader(value, path: key(name))
        if value.objectValue != nil { body(&child) }
        child.rejectUnknownKeys()
        problems += child.problems
    }

    /// Like `section`, for a setting that is off when absent or `null`.
    mutating func optionalSection(_ name: String, _ body: (inout ConfigReader) -> Void) {
        if let value = object[name], value.isNull {
            consumed.insert(name)
            return
        }
        section(name, body)
    }

    /// `database.tls`: `caFile` required, `certFile` and `keyFile` together or not at all,
    /// each a readable PEM file of the right kind (checked now, so a typo stops the daemon at
    /// start-up instead of failing every connection later). nil when a key is missing.
    mutating func databaseTLS() -> DatabaseConfiguration.TLS? {
        var ca: String?
        var cert: String?
        var key: String?
        optionalString("caFile", into: &ca)
        optionalString("certFile", into: &cert)
        optionalString("keyFile", into: &key)
        if ca == nil && (object["caFile"]?.isNull ?? true) {
            problem("caFile", "required with database.tls: the PEM file of the CA that signed the server's certificate")
        }
        if (cert == nil) != (key == nil) {
            problem(cert == nil ? "certFile" : "keyFile", "set certFile and keyFile together (the client certificate and its key), or neither")
        }
        if let ca { pemFile("caFile", ca, holding: "CERTIFICATE") }
        if let cert { pemFile("certFile", cert, holding: "CERTIFICATE") }
        if let key { pemFile("keyFile", key, holding: "PRIVATE KEY") }
        guard let ca, (cert == nil) == (key == nil) else { return nil }
        return DatabaseConfiguration.TLS(caFile: ca, certFile: cert, keyFile: key)
    }

    /// A problem unless `path` is a readable PEM file with a `-----BEGIN … <label>-----` block
    /// (`PRIVATE KEY` matches `EC PRIVATE KEY` and `RSA PRIVATE KEY` too; an encrypted key is
    /// refused: nothing here could give its passphrase).
    private mutating func pemFile(_ name: String, _ path: String, holding label: String) {
        guard !path.isEmpty else {
            problem(name, "expected a file path")
            return
        }
        let text: String
        do { text = try FileIO.readString(path) } catch {
            problem(name, "\(error)")
            return
        }
        let begins = text.split(whereSeparator: \.isNewline).filter { $0.hasPrefix("-----BEGIN ") && $0.hasSuffix("-----") }
        if begins.contains(where: { $0.contains("ENCRYPTED") }) || text.contains("Proc-Type: 4,ENCRYPTED") {
            problem(name, "\(path): an encrypted private key is not supported; give the key without a passphrase (mode 0600)")
        } else if !begins.contains(where: { $0.hasSuffix(" \(label)-----") }) {
            problem(name, "\(path): not a PEM file with a \(label)")
        }
    }

    mutating func string(_ name: String, into target: inout String) {
        guard let value = take(name) else { return }
        if let s = value.stringValue { target = s } else { problem(name, "expected a string, got \(value.typeName)") }
    }

    mutating func optionalString(_ name: String, into target: inout String?) {
        guard let value = take(name) else { return }
        if value.isNull {
            target = nil
        } else if let s = value.stringValue {
            target = s
        } else {
            problem(name, "expected a string or null, got \(value.typeName)")
        }
    }

    /// A provider API's call settings, as keys of the current section.
    mutating func clientSettings(into target: inout BillingConfiguration.APIClientSettings) {
        optionalString("caFile", into: &target.caFile)
        int("timeoutSeconds", into: &target.timeoutSeconds, range: 1...120)
        int("connectTimeoutSeconds", into: &target.connectTimeoutSeconds, range: 1...60)
        int("maxAttempts", into: &target.maxAttempts, range: 1...10)
        int("maxRetryAfterSeconds", into: &target.maxRetryAfterSeconds, range: 0...300)
    }

    /// `webhooks.endpoints`: `[{id, url, secret | secretFile, events}]`, ids unique.
    mutating func webhookEndpoints(into target: inout [BillingConfiguration.Webhooks.Endpoint]) {
        guard let value = take("endpoints") else { return }
        guard let items = value.arrayValue else { return problem("endpoints", "expected an array of {id, url, secretFile, events}") }
        var endpoints: [BillingConfiguration.Webhooks.Endpoint] = []
        for (index, item) in items.enumerated() {
            var r = ConfigReader(item, path: key("endpoints[\(index)]"))
            let known = BillingConfiguration.Webhooks.eventTypes
            var id = ""
            var url = ""
            var secret: String?
            var events = known
            r.string("id", into: &id)
            r.string("url", into: &url)
            r.optionalSecret("secret", into: &secret)
            r.stringArray("events", into: &events)
            if !BillingConfiguration.Webhooks.isValidEndpointId(id) {
                r.problem("id", "expected 1 to 64 of a-z, 0-9, - and _")
            } else if endpoints.contains(where: { $0.id == id }) {
                r.problem("id", "\"\(id)\" names two endpoints")
            }
            if !url.hasPrefix("https://") || url.utf8.count < 9 { r.problem("url", "expected an https:// URL") }
            if let secret, WebhookSignature(secret: secret) == nil {
                r.problem("secret", "expected a Standard Webhooks secret: whsec_ and the base64 of 24 to 64 random bytes")
            } else if secret == nil {
                r.problem("secretFile", "required: the file holding the endpoint's whsec_ secret")
            }
            if events.isEmpty || !events.allSatisfy(known.contains) {
                r.problem("events", "expected a non-empty array of \(known.joined(separator: ", "))")
            }
            r.rejectUnknownKeys()
            problems += r.problems
            endpoints.append(.init(id: id, url: url, secret: secret ?? "", events: Array(Set(events)).sorted()))
        }
        target = endpoints
    }

    mutating func int(_ name: String, into target: inout Int, range: ClosedRange<Int>) {
        guard let value = take(name) else { return }
        if let v = value.intValue, range.contains(v) {
            target = v
        } else {
            problem(name, "expected an integer in \(range.lowerBound)...\(range.upperBound)")
        }
    }

    mutating func stringArray(_ name: String, into target: inout [String]) {
        guard let value = take(name) else { return }
        if let array = value.arrayValue, let strings = Optional(array.compactMap(\.stringValue)), strings.count == array.count {
            target = strings
        } else {
            problem(name, "expected an array of strings")
        }
    }

    /// User names or numeric uids (strings or non-negative integers).
    mutating func userList(_ name: String, into target: inout [String]) {
        guard let value = take(name) else { return }
        guard let array = value.arrayValue else {
            problem(name, "expected an array of user names or uids")
            return
        }
        var users: [String] = []
        for (index, item) in array.enumerated() {
            if let text = item.stringValue, !text.isEmpty {
                users.append(text)
            } else if let uid = item.int64Value, (0...Int64(UInt32.max)).contains(uid) {
                users.append(String(uid))
            } else {
                problem("\(name)[\(index)]", "expected a user name or a uid")
            }
        }
        target = users
    }

    mutating func enumeration<E: RawRepresentable & CaseIterable>(_ name: String, into target: inout E) where E.RawValue == String {
        guard let value = take(name) else { return }
        if let v = value.stringValue.flatMap(E.init(rawValue:)) {
            target = v
        } else {
            problem(name, "expected one of \(E.allCases.map(\.rawValue).joined(separator: ", "))")
        }
    }

    /// `name` or `nameFile` (a path whose content is the secret); setting both is an error.
    mutating func optionalSecret(_ name: String, into target: inout String?) {
        let direct = take(name)
        let file = take(name + "File")
        if direct != nil && file != nil && !(file?.isNull ?? true) {
            problem(name, "set either \(name) or \(name)File, not both")
            return
        }
        if let file, let path = file.stringValue {
            do {
                var text = try FileIO.readString(path)
                while text.hasSuffix("\n") || text.hasSuffix("\r") { text.removeLast() }
                target = text
            } catch {
                problem(name + "File", "\(error)")
            }
        } else if let file, !file.isNull {
            problem(name + "File", "expected a file path")
        } else if let direct {
            if direct.isNull {
                target = nil
            } else if let s = direct.stringValue {
                target = s
            } else {
                problem(name, "expected a string")
            }
        }
    }

    mutating func secret(_ name: String, into target: inout String) {
        var value: String? = target
        optionalSecret(name, into: &value)
        target = value ?? ""
    }

    mutating func rejectUnknownKeys() {
        for name in object.keys where !consumed.contains(name) {
            problems.append("\(key(name)): unknown key")
        }
    }
}
