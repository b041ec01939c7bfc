import Synchronization

/// The keys the server signs with (`entitlements.signingKeyFiles`, SPEC §17): PEM private
/// keys, EC P-256 (ES256), one per file. The first signs; all of them are published
/// (`jwks`), so a key rotates with overlap: add the new key's file after the old one
/// (published, not yet signing), then put it first (signing; tokens of the old key still
/// verify), then remove the old one once its last tokens have lapsed.
///
/// Taken again without a restart: a file that changed is read again (looked at at most once
/// a second, when a token is signed or the keys published), and SIGHUP reads the list and
/// every file afresh (`reload(paths:)`). A file or list that does not give a usable set
/// keeps the keys in force, so a half-written key never stops signing. Each key's `kid` is
/// its RFC 7638 thumbprint: the same key has the same `kid` in every process and after
/// every reload, with nothing to configure.
final class SigningKeyRing: Sendable {
    /// One key: its private half and what is published of it.
    struct Key: Sendable {
        let kid: String
        let key: PrivateKey
        /// The public JWK with `kid`, `use: sig` and `alg: ES256`.
        let jwk: JSONObject
    }

    /// The set in force: the signing key first.
    struct Keys: Sendable {
        let keys: [Key]
        var signing: Key { keys[0] }
        /// `{"keys": [...]}` (RFC 7517 §5).
        var jwks: JSON { ["keys": .array(keys.map { .object($0.jwk) })] }
    }

    private struct State: Sendable {
        var paths: [String]
        var stamps: [FileStamp?]
        var keys: Keys
        var lastLookMilliseconds: Int64?
        var generation = 0
    }

    /// The configuration key the files come from, in every error.
    let setting: String
    private let state: Mutex<State>

    /// Reads every file; one that cannot be read, is not an EC P-256 private key or repeats
    /// another's key is a start-up error.
    init(paths: [String], setting: String = "entitlements.signingKeyFiles") throws(ConfigurationError) {
        self.setting = setting
        let keys = try Self.read(paths, setting: setting)
        state = Mutex(State(paths: paths, stamps: paths.map { FileStamp(path: $0) }, keys: keys))
    }

    /// The keys in force, after reading again the files that changed (at most once per
    /// `minimumIntervalMilliseconds`).
    func current(nowMilliseconds: Int64 = monotonicMilliseconds(), minimumIntervalMilliseconds: Int64 = 1000) -> Keys {
        let look = state.withLock { s -> [String]? in
            if let last = s.lastLookMilliseconds, nowMilliseconds >= last, nowMilliseconds - last < minimumIntervalMilliseconds {
                return nil
            }
            s.lastLookMilliseconds = nowMilliseconds
            return s.paths.map { FileStamp(path: $0) } == s.stamps ? nil : s.paths
        }
        if let paths = look { _ = try? reload(paths: paths) }
        return state.withLock { $0.keys }
    }

    /// Bumped on every reload that changed the keys.
    var generation: Int { state.withLock { $0.generation } }

    /// Reads `paths` (the list in force when nil) afresh; the set replaces the one in force
    /// when every file gives a key. True when the keys changed; throws (keeping the keys in
    /// force) otherwise.
    @discardableResult
    func reload(paths: [String]? = nil) throws(ConfigurationError) -> Bool {
        let paths = paths ?? state.withLock { $0.paths }
        let stamps = paths.map { FileStamp(path: $0) }
        let keys = try Self.read(paths, setting: setting)
        return state.withLock { s -> Bool in
            let changed = s.keys.keys.map(\.kid) != keys.keys.map(\.kid)
            s.paths = paths
            s.stamps = stamps
            s.keys = keys
            if changed { s.generation += 1 }
            return changed
        }
    }

    private static func read(_ paths: [String], setting: String) throws(ConfigurationError) -> Keys {
        guard !paths.isEmpty else { throw ConfigurationError("\(setting): no key file") }
        var keys: [Key] = []
        for path in paths {
            let key = try load(path, setting: setting)
            if keys.contains(where: { $0.kid == key.kid }) {
                throw ConfigurationError("\(setting): \(path) holds the same key as another file")
            }
            keys.append(key)
        }
        return Keys(keys: keys)
    }

    /// One file's key. The error never carries the file's content.
    static func load(_ path: String, setting: String) throws(ConfigurationError) -> Key {
        let text: String
        do { text = String(decoding: try FileIO.read(path, maxBytes: 64 << 10), as: UTF8.self) } catch {
            throw ConfigurationError("\(setting): \(error)")
        }
        let key = try PrivateKey.p256(pem: text, setting: "\(setting): \(path)")
        do {
            var jwk = try key.publicKey.jwk()
            let kid = try Self.thumbprint(jwk)
            jwk["kid"] = .string(kid)
            jwk["use"] = "sig"
            jwk["alg"] = "ES256"
            return Key(kid: kid, key: key, jwk: jwk)
        } catch {
            throw ConfigurationError("\(setting): \(path): its public key cannot be published (\(error))")
        }
    }

    /// RFC 7638: SHA-256 of the required members in lexicographic order, no whitespace.
    static func thumbprint(_ jwk: JSONObject) throws(CryptoError) -> String {
        guard let crv = jwk["crv"]?.stringValue, let x = jwk["x"]?.stringValue, let y = jwk["y"]?.stringValue else {
            throw .invalidEncoding("JWK", "expected an EC key")
        }
        return Base64URL.encode(SHA256.hash("{\"crv\":\"\(crv)\",\"kty\":\"EC\",\"x\":\"\(x)\",\"y\":\"\(y)\"}"))
    }
}
