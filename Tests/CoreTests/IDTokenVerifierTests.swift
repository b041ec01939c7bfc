import Glibc
import Testing

@testable import Core

/// Keys are generated per run by OpenSSL; tokens are signed by the same Core code the dev
/// token uses, and mangled by hand for the negative cases.
@Suite struct IDTokenVerifierTests {
    static let rsa = try! PrivateKey.generateRSA()
    static let ec = try! PrivateKey.generateEC()
    static let otherEC = try! PrivateKey.generateEC()
    static let p384 = try! PrivateKey.generateEC(curve: "secp384r1")
    static let now = Timestamp(secondsSinceEpoch: 1_800_000_000)

    let verifier: IDTokenVerifier = {
        let keys = TokenKeySet(keys: ["rsa-1": try! rsa.publicKey, "ec-1": try! ec.publicKey, "p384": try! p384.publicKey])
        return IDTokenVerifier(keys: keys, issuer: "https://issuer.test", audience: "billing-app", leewaySeconds: 60)
    }()

    func claims(
        sub: JSON = "6f1c1a8e-8a4e-4f37-9a44-1d2b3c4d5e6f", iss: JSON = "https://issuer.test", aud: JSON = "billing-app",
        exp: Int64 = 1_800_000_600, iat: Int64 = 1_799_999_000, nbf: Int64? = nil
    ) -> JSON {
        var c: JSONObject = ["sub": sub, "iss": iss, "aud": aud, "exp": .int(exp), "iat": .int(iat)]
        if let nbf { c["nbf"] = .int(nbf) }
        return .object(c)
    }

    func token(_ payload: JSON? = nil, key: PrivateKey = rsa, alg: String = "RS256", kid: String = "rsa-1") throws -> String {
        try CompactJWS.sign(payload: payload ?? claims(), header: ["kid": .string(kid)], key: key, algorithm: alg)
    }

    func reason(_ token: String) -> AuthError.Reason? {
        do {
            _ = try verifier.verify(token, now: Self.now)
            return nil
        } catch {
            return error.reason
        }
    }

    @Test func acceptsRS256AndES256() throws {
        let a = try verifier.verify(try token(), now: Self.now)
        #expect(a.subject == "6f1c1a8e-8a4e-4f37-9a44-1d2b3c4d5e6f" && a.issuer == "https://issuer.test")
        let b = try verifier.verify(try token(key: Self.ec, alg: "ES256", kid: "ec-1"), now: Self.now)
        #expect(b.expiresAt == Timestamp(secondsSinceEpoch: 1_800_000_600))
        #expect(reason(try token(claims(aud: ["other", "billing-app"]))) == nil, "aud may be an array")
    }

    @Test func refusesAlgNoneAndHS256WithThePublicKeyAsSecret() throws {
        let body = Base64URL.encode(claims().serialized())
        let none = Base64URL.encode(JSON.object(["alg": "none", "kid": "rsa-1"]).serialized()) + "." + body + "."
        #expect(reason(none) == .malformed || reason(none) == .unsupportedAlgorithm)
        let noneSigned = Base64URL.encode(JSON.object(["alg": "none", "kid": "rsa-1"]).serialized()) + "." + body + ".AAAA"
        #expect(reason(noneSigned) == .unsupportedAlgorithm)
        // The classic confusion attack: HMAC keyed with the server's public key PEM.
        let publicPEM = Array(try Self.rsa.pem().utf8)
        let header = Base64URL.encode(JSON.object(["alg": "HS256", "kid": "rsa-1", "typ": "JWT"]).serialized())
        let input = header + "." + body
        let mac = try HMACSHA256.authenticationCode(key: publicPEM, message: Array(input.utf8))
        #expect(reason(input + "." + Base64URL.encode(mac)) == .unsupportedAlgorithm)
    }

    @Test func refusesKeyOfTheWrongTypeOrCurve() throws {
        // ES256 header naming an RSA key, RS256 naming an EC key, ES256 on a P-384 key.
        #expect(reason(try token(key: Self.ec, alg: "ES256", kid: "rsa-1")) == .unsupportedAlgorithm)
        #expect(reason(try token(key: Self.rsa, alg: "RS256", kid: "ec-1")) == .unsupportedAlgorithm)
        // The signature is irrelevant: a P-384 key is refused for ES256 before verification.
        #expect(reason(try token(key: Self.ec, alg: "ES256", kid: "p384")) == .unsupportedAlgorithm)
    }

    @Test func refusesUnknownKidAndBadSignatures() throws {
        #expect(reason(try token(kid: "nope")) == .unknownKey)
        #expect(reason(try token(key: Self.otherEC, alg: "ES256", kid: "ec-1")) == .badSignature)
        var parts = try token().split(separator: ".").map(String.init)
        parts[1] = Base64URL.encode(claims(sub: "someone-else").serialized())
        #expect(reason(parts.joined(separator: ".")) == .badSignature, "tampered payload")
        var ecParts = try token(key: Self.ec, alg: "ES256", kid: "ec-1").split(separator: ".").map(String.init)
        ecParts[2] = Base64URL.encode([UInt8](repeating: 7, count: 63))
        #expect(reason(ecParts.joined(separator: ".")) == .badSignature, "ES256 signature of the wrong length")
    }

    @Test func checksTimeClaimsWithLeeway() throws {
        #expect(reason(try token(claims(exp: 1_799_999_900))) == .expired)
        #expect(reason(try token(claims(exp: 1_799_999_950))) == nil, "within 60 s leeway")
        #expect(reason(try token(claims(nbf: 1_800_000_100))) == .notYetValid)
        #expect(reason(try token(claims(iat: 1_800_000_500))) == .notYetValid)
        #expect(reason(try token(claims(nbf: 1_800_000_030))) == nil)
    }

    @Test func checksIssuerAudienceAndSubject() throws {
        #expect(reason(try token(claims(iss: "https://evil.test"))) == .wrongIssuer)
        #expect(reason(try token(claims(aud: "other-app"))) == .wrongAudience)
        #expect(reason(try token(claims(aud: ["a", "b"]))) == .wrongAudience)
        #expect(reason(try token(claims(sub: ""))) == .invalidSubject)
        #expect(reason(try token(claims(sub: .string(String(repeating: "x", count: 129))))) == .invalidSubject)
        #expect(reason(try token(claims(sub: 42))) == .invalidSubject)
    }

    @Test func refusesMalformedTokens() throws {
        for bad in ["", "a.b", "a.b.c.d", "!!!.e30.AAAA", "e30..AAAA", String(repeating: "a", count: 9000)] {
            #expect(reason(bad) == .malformed, "\(bad.prefix(20))")
        }
    }

    @Test func keySetsFromJWKSAndPEMMaps() throws {
        let jwks: JSON = [
            "keys": [
                .object(try Self.rsa.publicKey.jwk().merging(["kid": "r"])),
                .object(try Self.ec.publicKey.jwk().merging(["kid": "e"])),
            ]
        ]
        let set = try TokenKeySet.parse(jwks)
        let v = IDTokenVerifier(keys: set, issuer: "https://issuer.test", audience: "billing-app", leewaySeconds: 0)
        #expect(try v.verify(try token(kid: "r"), now: Self.now).subject.isEmpty == false)
        #expect(try v.verify(try token(key: Self.ec, alg: "ES256", kid: "e"), now: Self.now).subject.isEmpty == false)
        let pemMap: JSON = ["k1": .string(try Self.rsa.publicKeyPEM())]
        #expect(try TokenKeySet.parse(pemMap).keys["k1"] != nil)
        #expect(throws: ConfigurationError.self) { try TokenKeySet.parse(["keys": [["kid": "x", "kty": "oct", "k": "AAAA"]]]) }
        #expect(throws: ConfigurationError.self) { try TokenKeySet.parse(["k1": "not a pem"]) }
    }

    @Test func ecdsaSignatureConversionRoundTrips() throws {
        let der = try Self.ec.signSHA256(Array("hello".utf8))
        let raw = try ECDSASignature.rawFromDER(der)
        #expect(raw.count == 64)
        #expect(try Self.ec.publicKey.verifySHA256(signature: try ECDSASignature.derFromRaw(raw), message: Array("hello".utf8)))
        #expect(throws: CryptoError.self) { try ECDSASignature.derFromRaw([1, 2, 3]) }
    }
}

extension JSONObject {
    func merging(_ other: JSONObject) -> JSONObject {
        var copy = self
        for (key, value) in other { copy[key] = value }
        return copy
    }
}

/// `auth.keysFile` rotations without a restart: a token naming a new `kid` makes the
/// process read the changed file; SIGHUP (`reload`) drops a removed key, cached verdicts
/// included; a broken file keeps the keys in force.
@Suite struct TokenKeyRotationTests {
    static let now = Timestamp(secondsSinceEpoch: 1_800_000_000)
    let path = "/tmp/fcgibilling-token-keys-\(getpid())-\(UInt32.random(in: 0...UInt32.max)).json"

    func write(_ keys: [String: PrivateKey]) throws {
        var list: [JSON] = []
        for (kid, key) in keys.sorted(by: { $0.key < $1.key }) {
            var jwk = try key.publicKey.jwk()
            jwk["kid"] = .string(kid)
            list.append(.object(jwk))
        }
        try writeText(JSON.object(["keys": .array(list)]).serializedString())
    }

    func writeText(_ text: String) throws {
        let tmp = path + ".tmp"
        let fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC, 0o600)
        #expect(fd >= 0)
        _ = text.withCString { Glibc.write(fd, $0, strlen($0)) }
        close(fd)
        #expect(rename(tmp, path) == 0)
    }

    func token(_ key: PrivateKey, kid: String) throws -> String {
        try CompactJWS.sign(
            payload: [
                "sub": "u1", "iss": "https://issuer.test", "aud": "billing-app",
                "exp": .int(1_800_000_600), "iat": .int(1_799_999_000),
            ],
            header: ["kid": .string(kid)], key: key, algorithm: "ES256")
    }

    @Test func newKidIsPickedUpAndRemovedKeysStopWorkingOnReload() throws {
        defer { unlink(path) }
        let a = try PrivateKey.generateEC()
        let b = try PrivateKey.generateEC()
        try write(["a": a])
        let store = try TokenKeyStore(path: path)
        let verifier = IDTokenVerifier(
            keyStore: store, issuer: "https://issuer.test", audience: "billing-app",
            leewaySeconds: 60, cachedTokens: 100)
        let tokenA = try token(a, kid: "a")
        let tokenB = try token(b, kid: "b")
        #expect(try verifier.verify(tokenA, now: Self.now).subject == "u1")
        #expect(throws: AuthError(.unknownKey)) { try verifier.verify(tokenB, now: Self.now) }

        // The provider publishes b beside a: the next token naming b finds it, no restart.
        try write(["a": a, "b": b])
        // (The file was looked at for the refused b token an instant ago: wait out the bound.)
        usleep(1_100_000)
        #expect(try verifier.verify(tokenB, now: Self.now).subject == "u1")
        #expect(try verifier.verify(tokenA, now: Self.now).subject == "u1")

        // a is withdrawn; SIGHUP reloads: a's tokens, cached or not, are refused from then on.
        try write(["b": b])
        #expect(try store.reload())
        #expect(throws: AuthError(.unknownKey)) { try verifier.verify(tokenA, now: Self.now) }
        #expect(try verifier.verify(tokenB, now: Self.now).subject == "u1")

        // A half-written file is refused and the keys in force stay.
        try writeText("{\"keys\": [")
        #expect(throws: ConfigurationError.self) { try store.reload() }
        #expect(try verifier.verify(tokenB, now: Self.now).subject == "u1")
        #expect(!store.reloadIfChanged(nowMilliseconds: .max), "a broken file never replaces the keys")
    }
}
