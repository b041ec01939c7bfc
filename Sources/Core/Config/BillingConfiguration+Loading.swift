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
            r.section("inAppKey") { r in
                r.optionalString("issuerId", into: &apple.inAppKey.issuerId)
                r.optionalString("keyId", into: &apple.inAppKey.keyId)
                r.optionalSecret("privateKey", into: &apple.inAppKey.privateKey)
                let set = [apple.inAppKey.issuerId, apple.inAppKey.keyId, apple.inAppKey.privateKey].filter { !($0 ?? "").isEmpty }
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
        reader.section("live") { r in
            r.optionalString("publisherSocket", into: &live.publisherSocket)
            if live.publisherSocket?.isEmpty == true { live.publisherSocket = nil }
            if let socket = live.publisherSocket, !socket.hasPrefix("/") { r.problem("publisherSocket", "expected an absolute path") }
        }
        reader.section("outbox") { r in r.bool("enabled", into: &outbox.enabled) }
        reader.section("google") { r in
            r.optionalString("packageName", into: &google.packageName)
            r.optionalString("serviceAccountFile", into: &google.serviceAccountFile)
            r.string("tokenUrl", into: &google.tokenUrl)
            r.string("apiUrl", into: &google.apiUrl)
            r.clientSettings(into: &google.client)
            r.string("pushKeysUrl", into: &google.pushKeysUrl)
            r.optionalString("pushAudience", into: &google.pushAudience)
            r.optionalString("pushServiceAccount", into: &google.pushServiceAccount)
            for (name, url) in [("tokenUrl", google.tokenUrl), ("apiUrl", google.apiUrl), ("pushKeysUrl", google.pushKeysUrl)]
            where !url.hasPrefix("https://") || url.utf8.count < 9 {
                r.problem(name, "expected an https:// URL")
            }
            if let package = google.packageName,
                package.isEmpty || package.utf8.count > 255
                    || !package.utf8.allSatisfy({
                        $0 == 0x2E || $0 == 0x5F || (0x30...0x39).contains($0) || (0x41...0x5A).contains($0) || (0x61...0x7A).contains($0)
                    })
            {
                r.problem("packageName", "expected an application id such as com.example.app")
            }
            if (google.packageName == nil) != (google.serviceAccountFile == nil) {
                r.problem("serviceAccountFile", "set packageName and serviceAccountFile together")
            }
        }
        reader.section("entitlements") { r in
            r.stringArray("signingKeyFiles", into: &entitlements.signingKeyFiles)
            for path in entitlements.signingKeyFiles where !path.hasPrefix("/") {
                r.problem("signingKeyFiles", "\"\(path)\" is not an absolute path")
            }
            r.string("issuer", into: &entitlements.issuer)
            if entitlements.issuer.isEmpty { r.problem("issuer", "expected a non-empty string") }
            r.int("offlineSeconds", into: &entitlements.offlineSeconds, range: 60...(30 * 86_400))
        }
        database.writesOutbox = outbox.enabled
        if !outbox.enabled {
            if !webhooks.endpoints.isEmpty {
                reader.problem("outbox.enabled", "false leaves webhooks.endpoints nothing to send: remove them, or enable the outbox")
            }
            if live.isEnabled {
                reader.problem("outbox.enabled", "false leaves live.publisherSocket nothing to publish: unset it, or enable the outbox")
            }
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
