/// The keys that may sign app ID tokens, by `kid`, from `auth.keysFile`: either a JWKS
/// (`{"keys": [{kid, kty, n, e | crv, x, y}]}`) or a `{kid: PEM certificate}` map, the form
/// Google publishes for Firebase ID tokens.
struct TokenKeySet: Sendable {
    let keys: [String: PublicKey]

    init(keys: [String: PublicKey]) { self.keys = keys }

    static func load(path: String) throws(ConfigurationError) -> TokenKeySet {
        let document: JSON
        do {
            document = try JSON.parse(try FileIO.read(path, maxBytes: 1 << 20))
        } catch let error as FileIO.Error {
            throw ConfigurationError("auth.keysFile: \(error)")
        } catch {
            throw ConfigurationError("auth.keysFile: \(path): \(error)")
        }
        do {
            return try parse(document)
        } catch {
            throw ConfigurationError("auth.keysFile: \(path): \(error.problems.joined(separator: "; "))")
        }
    }

    static func parse(_ document: JSON) throws(ConfigurationError) -> TokenKeySet {
        guard case .object(let object) = document else { throw ConfigurationError("expected a JSON object") }
        var keys: [String: PublicKey] = [:]
        var problems: [String] = []
        if let jwks = object["keys"] {
            guard let list = jwks.arrayValue else { throw ConfigurationError("keys: expected an array of JWKs") }
            for (index, jwk) in list.enumerated() {
                guard let kid = jwk["kid"]?.stringValue, !kid.isEmpty else {
                    problems.append("keys[\(index)]: kid missing")
                    continue
                }
                do {
                    keys[kid] = try key(fromJWK: jwk)
                } catch {
                    problems.append("keys[\(index)] (\(kid)): unusable key (\(error))")
                }
            }
        } else {
            for (kid, value) in object {
                guard let pem = value.stringValue else {
                    problems.append("\(kid): expected a PEM string")
                    continue
                }
                do { keys[kid] = try PublicKey(pem: pem) } catch { problems.append("\(kid): unreadable PEM") }
            }
        }
        if !problems.isEmpty { throw ConfigurationError(problems: problems) }
        if keys.isEmpty { throw ConfigurationError("no keys") }
        return TokenKeySet(keys: keys)
    }

    private static func key(fromJWK jwk: JSON) throws(CryptoError) -> PublicKey {
        func member(_ name: String) throws(CryptoError) -> [UInt8] {
            guard let text = jwk[name]?.stringValue else { throw .invalidEncoding("JWK", "\(name) missing") }
            return try Base64URL.decode(text)
        }
        switch jwk["kty"]?.stringValue {
        case "RSA":
            return try PublicKey(rsaModulus: try member("n"), exponent: try member("e"))
        case "EC":
            guard jwk["crv"]?.stringValue == "P-256" else { throw .invalidEncoding("JWK", "only the P-256 curve is accepted") }
            return try PublicKey(ecCurve: "prime256v1", x: try member("x"), y: try member("y"))
        default:
            throw .invalidEncoding("JWK", "kty must be RSA or EC")
        }
    }
}
