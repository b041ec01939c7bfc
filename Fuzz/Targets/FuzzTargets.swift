import Glibc

/// One fuzz target: a name (the corpus directory Fuzz/corpus/<name>) and what runs each input.
/// A target must never crash, hang or leak on any input; the assertions below are the
/// properties that must hold (a failing `fuzzCheck` aborts, which libFuzzer records as a crash).
struct FuzzTarget: Sendable {
    let name: String
    let body: @Sendable ([UInt8]) -> Void
}

func fuzzCheck(_ condition: Bool, _ message: @autoclosure () -> String) {
    if !condition {
        fuzzFail("fuzz property violated: \(message())")
    }
}

func fuzzFail(_ message: String) -> Never {
    let line = Array((message + "\n").utf8)
    _ = line.withUnsafeBytes { write(2, $0.baseAddress, $0.count) }
    abort()
}

enum FuzzTargets {
    static let all: [FuzzTarget] = [
        FuzzTarget(name: "jws", body: jws),
        FuzzTarget(name: "idtoken", body: idToken),
        FuzzTarget(name: "base64url", body: base64url),
        FuzzTarget(name: "der", body: der),
        FuzzTarget(name: "jsonrpc", body: jsonRPC),
        FuzzTarget(name: "revenuecat", body: revenueCat),
        FuzzTarget(name: "json", body: json),
        FuzzTarget(name: "appstore", body: appStore),
        FuzzTarget(name: "timestamp", body: timestamp),
        FuzzTarget(name: "erasure", body: erasure),
    ]

    static let selected: FuzzTarget = {
        let name = getenv("FUZZ_TARGET").map { String(cString: $0) } ?? ""
        guard let target = all.first(where: { $0.name == name }) else {
            fuzzFail("FUZZ_TARGET must be one of: \(all.map(\.name).joined(separator: " "))")
        }
        return target
    }()

    // MARK: Erasure (SPEC §19)

    /// First byte picks the mode. 0: the rest is a user id: a well-formed id has no control
    /// character and no whitespace at either end, and `users.idPattern` matches only such ids.
    /// 1: the rest is a stored payload, scrubbed of the ids it names: no such id, no
    /// anonymous RevenueCat id and no `subscriber_attributes` is left, and scrubbing again
    /// changes nothing.
    static func erasure(_ bytes: [UInt8]) {
        guard let mode = bytes.first else { return }
        let rest = Array(bytes.dropFirst())
        if mode % 2 == 0 {
            let id = String(decoding: rest, as: UTF8.self)
            if UserIdPattern.isWellFormed(id) {
                fuzzCheck(!id.isEmpty && id.utf8.count <= 128, "a well-formed id of \(id.utf8.count) bytes")
                fuzzCheck(!id.unicodeScalars.contains { $0.properties.generalCategory == .control }, "a control character in a well-formed id")
                fuzzCheck(
                    !id.unicodeScalars.first!.properties.isWhitespace && !id.unicodeScalars.last!.properties.isWhitespace,
                    "whitespace at an end of a well-formed id")
            }
            if UserIdPattern(".*")!.matches(id) { fuzzCheck(UserIdPattern.isWellFormed(id), "idPattern matched an ill-formed id") }
            return
        }
        guard let payload = try? JSON.parse(rest, limits: JSONLimits(maxBytes: 1 << 16, maxDepth: 16)) else { return }
        let tombstone = "erased:0123456789abcdef0123456789abcdef"
        let identities = PersonalData.aliases(in: payload).filter { !$0.isEmpty && !tombstone.contains($0) }
        let long = identities.filter { $0.utf8.count >= PersonalData.minimumEmbeddedLength }
        let clean = PersonalData.scrub(payload, identities: identities, tombstone: tombstone)
        func walk(_ value: JSON, identity: Bool) {
            switch value {
            case .string(let s):
                fuzzCheck(!identities.contains(s) || s == tombstone, "an erased id survived the scrub")
                fuzzCheck(!long.contains { s.contains($0) }, "a long erased id survived inside a string")
                fuzzCheck(!(identity && s.hasPrefix("$RCAnonymousID:")), "an anonymous id survived the scrub")
            case .array(let items): for item in items { walk(item, identity: identity) }
            case .object(let object):
                for (key, member) in object {
                    fuzzCheck(!PersonalData.removedMembers.contains(key), "\(key) survived the scrub")
                    fuzzCheck(!identities.contains(key) || key == tombstone, "an erased id survived as a member name")
                    walk(member, identity: PersonalData.identityMembers.contains(key))
                }
            default: break
            }
        }
        walk(clean, identity: false)
        fuzzCheck(PersonalData.scrub(clean, identities: identities, tombstone: tombstone) == clean, "scrubbing is not idempotent")
    }

    // MARK: Dates

    /// `Timestamp(iso8601:)` on arbitrary text: nil, or a real instant that prints and
    /// parses back to itself (a date the calendar rolled over, 02-31 → 03-03, would not).
    static func timestamp(_ bytes: [UInt8]) {
        let text = String(decoding: bytes, as: UTF8.self)
        guard let parsed = Timestamp(iso8601: text) else { return }
        let printed = parsed.iso8601
        fuzzCheck(Timestamp(iso8601: printed) == parsed, "\(printed) does not parse back to itself")
        let civil = parsed.civil
        fuzzCheck((1...12).contains(civil.month) && (1...31).contains(civil.day), "impossible civil date \(printed)")
        // A date-only or UTC input names its own calendar fields: they must survive.
        if bytes.count >= 10, text.utf8.count == 10 || text.hasSuffix("Z") {
            fuzzCheck(printed.hasPrefix(String(text.prefix(10))), "\(text) became \(printed)")
        }
    }

    // MARK: JWS / ID tokens

    /// `CompactJWS.parse` on arbitrary text: either a value or a typed error.
    static func jws(_ bytes: [UInt8]) {
        let text = String(decoding: bytes, as: UTF8.self)
        if let parsed = try? CompactJWS.parse(text) {
            fuzzCheck(parsed.header.count >= 0 && parsed.signingInput.count < bytes.count + 1, "signing input longer than the token")
            _ = parsed.algorithm
        }
    }

    /// Keys and a verifier built once: an RSA and an EC key, both trusted.
    private static let signer: (rsa: PrivateKey, ec: PrivateKey, verifier: IDTokenVerifier) = {
        let rsa = try! PrivateKey.generateRSA(bits: 2048)
        let ec = try! PrivateKey.generateEC()
        let keys = TokenKeySet(keys: ["rsa-1": try! rsa.publicKey, "ec-1": try! ec.publicKey])
        return (rsa, ec, IDTokenVerifier(keys: keys, issuer: "https://issuer.example", audience: "app", leewaySeconds: 60))
    }()
    private static let now = Timestamp(millisecondsSinceEpoch: 1_750_000_000_000)

    /// `IDTokenVerifier.verify`. First byte picks the mode: 0 = the rest is the token as
    /// text (parsing, alg/kid confusion, bad signatures); 1/2 = the rest is a claims object,
    /// signed properly with the trusted RSA/EC key, so the claim checks themselves get
    /// fuzzed; 3 = the rest is a header object, signed with the RSA key.
    static func idToken(_ bytes: [UInt8]) {
        guard let mode = bytes.first else { return }
        let rest = Array(bytes.dropFirst())
        let token: String
        switch mode % 4 {
        case 0:
            token = String(decoding: rest, as: UTF8.self)
        case 1, 2:
            guard let claims = try? JSON.parse(rest, limits: JSONLimits(maxBytes: 4096, maxDepth: 8)) else { return }
            let rsa = mode % 4 == 1
            let header: JSON = ["kid": .string(rsa ? "rsa-1" : "ec-1"), "alg": .string(rsa ? "RS256" : "ES256")]
            guard
                let signed = try? signRaw(
                    header: header, payload: claims,
                    key: rsa ? signer.rsa : signer.ec, ec: !rsa)
            else { return }
            token = signed
        default:
            guard let header = try? JSON.parse(rest, limits: JSONLimits(maxBytes: 4096, maxDepth: 8)) else { return }
            let claims: JSON = [
                "iss": "https://issuer.example", "aud": "app", "sub": "u",
                "iat": .int(now.millisecondsSinceEpoch / 1000), "exp": .int(now.millisecondsSinceEpoch / 1000 + 60),
            ]
            guard let signed = try? signRaw(header: header, payload: claims, key: signer.rsa, ec: false) else { return }
            token = signed
        }
        do {
            let verified = try signer.verifier.verify(token, now: now)
            fuzzCheck(!verified.subject.isEmpty && verified.subject.utf8.count <= 128, "accepted an invalid subject")
            fuzzCheck(verified.issuer == "https://issuer.example", "accepted a wrong issuer")
            fuzzCheck(mode % 4 != 0, "accepted a token nobody signed")
        } catch {
            _ = error.description
        }
    }

    static func signRaw(header: JSON, payload: JSON, key: PrivateKey, ec: Bool) throws -> String {
        let input = Base64URL.encode(header.serialized()) + "." + Base64URL.encode(payload.serialized())
        var signature = try key.signSHA256(Array(input.utf8))
        if ec { signature = try ECDSASignature.rawFromDER(signature) }
        return input + "." + Base64URL.encode(signature)
    }

    // MARK: Encodings and certificates

    /// `Base64URL.decode` never crashes; what it decodes re-encodes to canonical text that
    /// decodes to the same bytes.
    static func base64url(_ bytes: [UInt8]) {
        if let decoded = try? Base64URL.decode(bytes) {
            // Canonical only (SPEC §19): what decodes is exactly the encoding of its bytes, so
            // no two spellings of one signed value both verify.
            fuzzCheck(Array(Base64URL.encode(decoded).utf8) == bytes, "a non-canonical base64url spelling decoded")
        }
        let encoded = Base64URL.encode(bytes)
        fuzzCheck((try? Base64URL.decode(encoded)) == bytes, "encode/decode is not the identity")
        fuzzCheck(
            !encoded.utf8.contains(where: { $0 == UInt8(ascii: "=") || $0 == UInt8(ascii: "+") || $0 == UInt8(ascii: "/") }),
            "base64url output has a non-url character")
        if let decoded = try? Base64.decode(String(decoding: bytes, as: UTF8.self)) {
            _ = Base64.encode(decoded)
        }
        _ = try? ECDSASignature.derFromRaw(bytes)
        _ = try? ECDSASignature.rawFromDER(bytes)
    }

    /// `PublicKey(certificateDER:)` (x5c entries) and the PEM / JWK paths.
    static func der(_ bytes: [UInt8]) {
        if let key = try? PublicKey(certificateDER: bytes) {
            _ = key.verifySHA256(signature: Array(bytes.prefix(64)), message: bytes)
        }
        if bytes.count >= 2 {
            let half = Int(bytes[0]) % bytes.count
            _ = try? PublicKey(rsaModulus: Array(bytes[1..<max(1, half)]), exponent: Array(bytes[max(1, half)...]))
            _ = try? PublicKey(ecCurve: "prime256v1", x: Array(bytes[1..<max(1, half)]), y: Array(bytes[max(1, half)...]))
        }
        _ = try? PublicKey(pem: "-----BEGIN CERTIFICATE-----\n" + Base64.encode(bytes) + "\n-----END CERTIFICATE-----\n")
    }

    // MARK: JSON-RPC

    private static let services = BillingServices.unconfigured(clock: FixedClock(now))
    private static let rpc: JSONRPCServerProtocol<AdminRPCContext> = {
        var registry = BillingRPCMethods.makeRegistry(services: services)
        registry.register("fuzz.echo", summary: "echo params", params: "any") { request, _ in
            _ = try? request.params.requireString("userId")
            _ = try? request.params.optionalInt("limit")
            _ = try? request.params.requireTimestamp("at")
            return request.params.value ?? .null
        }
        return JSONRPCServerProtocol(registry: registry, limits: RPCLimits(maxMessageBytes: 1 << 16, maxBatchLength: 100, maxDepth: 32))
    }()
    nonisolated(unsafe) private static let rpcContext = AdminRPCContext(clock: FixedClock(now))

    /// `JSONRPCServerProtocol.handle`: every reply is valid JSON-RPC 2.0 (an object or a
    /// non-empty array of objects carrying `jsonrpc: "2.0"`), never a crash.
    static func jsonRPC(_ bytes: [UInt8]) {
        guard let reply = rpc.handle(message: bytes, context: rpcContext) else { return }
        guard let parsed = try? JSON.parse(reply, limits: JSONLimits(maxBytes: 1 << 24, maxDepth: 64)) else {
            fuzzCheck(false, "reply is not JSON")
            return
        }
        let objects: [JSON]
        if case .array(let list) = parsed { objects = list } else { objects = [parsed] }
        fuzzCheck(!objects.isEmpty, "empty batch reply")
        for object in objects {
            fuzzCheck(object["jsonrpc"]?.stringValue == "2.0", "reply without jsonrpc 2.0")
            fuzzCheck((object["result"] == nil) != (object["error"] == nil), "reply must have exactly one of result/error")
        }
    }

    // MARK: Provider payloads

    private static let tiers = TierResolver(rules: [(match: "pro", tier: .pro), (match: "plus", tier: .plus)], products: [:])

    /// `RevenueCatDelivery.decode` on any JSON: a delivery or a `PayloadError`; a decoded
    /// event honours the decoder's bounds, and its stored payload (the `event` member as the
    /// parser dumped it from its own tree) is byte for byte the decoded value's serialization.
    static func revenueCat(_ bytes: [UInt8]) {
        guard let parsed = try? JSON.parse(bytes, limits: JSONLimits(maxBytes: 1 << 20, maxDepth: 32), serializingMember: "event") else { return }
        let body = parsed.value
        fuzzCheck(parsed.member == body["event"]?.serialized(), "the event's text as parsed differs from its value serialized")
        do {
            let delivery = try RevenueCatDelivery.decode(body, tiers: tiers, idPattern: .uuid, eventText: parsed.member)
            checkFitsTheInbox(delivery.event, candidates: delivery.userCandidates)
            fuzzCheck(delivery.payload.serialized == body["event"]?.serialized(), "stored payload differs from the event")
        } catch {
            fuzzCheck(!error.message.isEmpty, "payload error without a message")
        }
        // The same input as an answer of RevenueCat's REST API (CustomerInfo, SPEC §15):
        // decoded or refused, and every event it states fits the inbox.
        let user = "6f1c1a8e-8a4e-4f37-9a44-1d2b3c4d5e6f"
        do {
            let subscriber = try RevenueCatSubscriber.decode(body, appUserId: user, tiers: tiers, catalog: [:])
            for pulled in subscriber.pulled {
                var event = pulled.event
                if let digest = pulled.stateDigest {
                    // The longest key the reconciler gives a state (its predecessor's id last).
                    event.providerEventId = "rcpull:0123456789abcdef:state:\(digest):\(UInt64.max)"
                }
                checkFitsTheInbox(event, candidates: [user])
                fuzzCheck(pulled.event.provider == .revenuecatPull && pulled.event.intrinsicAt != nil, "a pulled event without its time")
                fuzzCheck(
                    pulled.stateDigest.map { _ in pulled.event.kind == .subscriberState } ?? !pulled.event.providerEventId.isEmpty,
                    "a pulled event without a key")
            }
        } catch {
            fuzzCheck(!error.message.isEmpty, "payload error without a message")
        }
    }

    /// What the inbox's CHECK constraints and column widths demand of a decoded event, and
    /// the id pattern of its user candidates (a violation there is a 500, retried forever).
    static func checkFitsTheInbox(_ event: StoreEvent, candidates: [String]) {
        fuzzCheck(!event.providerEventId.isEmpty && event.providerEventId.utf8.count <= 191, "event id out of bounds")
        fuzzCheck(candidates.allSatisfy(UserIdPattern.uuid.matches), "candidate not matching the id pattern")
        fuzzCheck(
            event.priceMilli == nil || event.currency.map { $0.utf8.count == 3 && $0.utf8.allSatisfy { $0 >= 65 && $0 <= 90 } } == true,
            "a price without a valid ISO 4217 currency")
        fuzzCheck(
            event.rawType.utf8.count <= 64 && (event.platform?.utf8.count ?? 0) <= 32 && (event.cancelReason?.utf8.count ?? 0) <= 64,
            "a string longer than its inbox column")
        fuzzCheck(
            [event.subscriptionId, event.productId, event.newProductId].allSatisfy { ($0?.utf8.count ?? 0) <= 191 },
            "an id longer than its inbox column")
    }

    /// `JSON.parse` / `serialized()`: what parses re-serializes to something that parses to the same value.
    static func json(_ bytes: [UInt8]) {
        guard let value = try? JSON.parse(bytes, limits: JSONLimits(maxBytes: 1 << 20, maxDepth: 64)) else { return }
        let text = value.serialized()
        guard let again = try? JSON.parse(text, limits: JSONLimits(maxBytes: 1 << 24, maxDepth: 64)) else {
            fuzzCheck(false, "serialized JSON does not parse")
            return
        }
        fuzzCheck(again == value || value.containsNaNLike, "JSON round trip changed the value")
    }
}

extension JSON {
    /// Doubles compare unequal to themselves only for NaN, which JSON cannot carry; kept for safety.
    var containsNaNLike: Bool {
        switch self {
        case .double(let d): return !d.isFinite
        case .array(let a): return a.contains { $0.containsNaNLike }
        case .object(let o): return o.contains { $0.value.containsNaNLike }
        default: return false
        }
    }
}
