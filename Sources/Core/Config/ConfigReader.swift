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

    mutating func bool(_ name: String, into target: inout Bool) {
        guard let value = take(name) else { return }
        if case .bool(let v) = value { target = v } else { problem(name, "expected true or false") }
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
