/// Why a bearer token was refused. Every reason answers 401; `reason` is a stable code for
/// logs and the error message, never token content.
struct AuthError: Error, Sendable, Equatable, CustomStringConvertible {
    enum Reason: String, Sendable {
        case missing = "missing_token"
        case malformed = "malformed_token"
        case unsupportedAlgorithm = "unsupported_algorithm"
        case unknownKey = "unknown_key"
        case badSignature = "bad_signature"
        case expired = "token_expired"
        case notYetValid = "token_not_yet_valid"
        case wrongIssuer = "wrong_issuer"
        case wrongAudience = "wrong_audience"
        case invalidSubject = "invalid_subject"
        /// A Pub/Sub push token whose `email` is not the configured service account, or not verified.
        case wrongAccount = "wrong_account"
    }

    let reason: Reason
    init(_ reason: Reason) { self.reason = reason }

    var description: String {
        switch reason {
        case .missing: return "an Authorization: Bearer ID token is required"
        case .malformed: return "the ID token is malformed"
        case .unsupportedAlgorithm: return "the ID token's algorithm is not accepted (RS256 or ES256 only)"
        case .unknownKey: return "the ID token is signed by an unknown key"
        case .badSignature: return "the ID token's signature is invalid"
        case .expired: return "the ID token has expired"
        case .notYetValid: return "the ID token is not valid yet"
        case .wrongIssuer: return "the ID token's issuer is not accepted"
        case .wrongAudience: return "the ID token's audience is not accepted"
        case .invalidSubject: return "the ID token's subject is not a valid user id"
        case .wrongAccount: return "the token's email is not the expected, verified service account"
        }
    }
}

/// The claims FCGIBilling uses from a verified token.
struct VerifiedIDToken: Sendable, Equatable {
    let subject: String
    let issuer: String
    let expiresAt: Timestamp
    /// OpenID Connect's `email` and `email_verified`, when the token carries them (Google's
    /// tokens of a service account: a Pub/Sub push).
    var email: String? = nil
    var emailVerified = false
}

/// Verifies app ID tokens (SPEC §3): RS256 or ES256 only, the key chosen by `kid` and of the
/// algorithm's own type (an RSA key never verifies an ES256 token, nor the reverse; HS* and
/// `none` are refused before any key is looked at); `iss`, `aud`, `exp`, `nbf`, `iat`
/// checked with `leewaySeconds`; `sub` a well-formed user id (`UserIdPattern.isWellFormed`:
/// 1…128 bytes, no control character, no whitespace at either end).
struct IDTokenVerifier: Sendable {
    /// The keys in force, reloaded without a restart (`TokenKeyStore`).
    let keyStore: TokenKeyStore
    let issuer: String
    /// `issuer` and the other spellings accepted for it (Google writes both
    /// `https://accounts.google.com` and `accounts.google.com`).
    let issuers: Set<String>
    let audience: String
    let leewaySeconds: Int64

    /// Tokens whose signature already verified in this process (by digest), so a client
    /// presenting the same token again costs a hash instead of an RSA or ECDSA verification.
    /// A signature that verified under the keys in force always would; the cache is keyed by
    /// the key set's generation too, so a reload that removes a key stops honouring tokens it
    /// signed. Times are still judged on every use. nil: no cache.
    let verified: BoundedCache<TokenDigest, SignedClaims>?

    /// `cachedTokens`: verified tokens remembered per generation (0: verify every time).
    init(keys: TokenKeySet, issuer: String, audience: String, leewaySeconds: Int, cachedTokens: Int = 0) {
        self.init(
            keyStore: TokenKeyStore(keys: keys), issuer: issuer, audience: audience, leewaySeconds: leewaySeconds,
            cachedTokens: cachedTokens)
    }

    init(
        keyStore: TokenKeyStore, issuer: String, alsoAccepting otherIssuers: [String] = [], audience: String, leewaySeconds: Int,
        cachedTokens: Int = 0
    ) {
        self.keyStore = keyStore
        self.issuer = issuer
        self.issuers = Set([issuer] + otherIssuers)
        self.audience = audience
        self.leewaySeconds = Int64(min(max(leewaySeconds, 0), 86_400))
        self.verified = cachedTokens > 0 ? BoundedCache(capacity: cachedTokens) : nil
    }

    /// 9999-12-31T23:59:59Z: the largest `exp`, `nbf` or `iat` accepted.
    static let maxNumericDate: Int64 = 253_402_300_799

    func verify(_ token: some StringProtocol, now: Timestamp) throws(AuthError) -> VerifiedIDToken {
        guard let verified else { return try signedClaims(token).validated(at: now, leewaySeconds: leewaySeconds) }
        let digest = TokenDigest(token, generation: keyStore.generation)
        let claims: SignedClaims
        if let cached = verified[digest] {
            claims = cached
        } else {
            claims = try signedClaims(token)
            verified.store(claims, for: digest)
        }
        return try claims.validated(at: now, leewaySeconds: leewaySeconds)
    }

    /// Everything about a token that does not depend on the clock: structure, algorithm,
    /// key, signature, issuer, audience, subject, and the NumericDate claims parsed.
    func signedClaims(_ token: some StringProtocol) throws(AuthError) -> SignedClaims {
        let jws: CompactJWS
        do { jws = try CompactJWS.parse(token, maxBytes: 8192) } catch { throw AuthError(.malformed) }
        let algorithm = jws.algorithm
        guard algorithm == "RS256" || algorithm == "ES256" else { throw AuthError(.unsupportedAlgorithm) }
        guard jws.header["crit"] == nil else { throw AuthError(.unsupportedAlgorithm) }
        guard let kid = jws.header["kid"]?.stringValue else { throw AuthError(.unknownKey) }
        // An unknown kid may be a rotation the process has not seen: the issuer's URL or the
        // file is looked at again, within their bounds (`TokenKeyStore.key(for:)`).
        guard let key = keyStore.key(for: kid) else {
            throw AuthError(.unknownKey)
        }

        let signature: [UInt8]
        switch (algorithm, key.kind) {
        case ("RS256", .rsa(let bits)) where bits >= 2048:
            signature = jws.signature
        case ("ES256", .ec("prime256v1")):
            do { signature = try ECDSASignature.derFromRaw(jws.signature) } catch { throw AuthError(.badSignature) }
        default:
            throw AuthError(.unsupportedAlgorithm)
        }
        guard key.verifySHA256(signature: signature, message: jws.signingInput) else { throw AuthError(.badSignature) }

        let claims = jws.payload
        // NumericDate claims are bounded to years 1970…9999 before any arithmetic: a signed
        // `exp` near Int64.max overflowed `exp + leeway` and `Timestamp(secondsSinceEpoch:)`
        // and trapped, killing the worker process (found by scripts/fuzz, target idtoken).
        func numericDate(_ name: String) throws(AuthError) -> Int64? {
            guard let value = claims[name] else { return nil }
            guard let seconds = value.int64Value, (0...Self.maxNumericDate).contains(seconds) else { throw AuthError(.malformed) }
            return seconds
        }
        guard let exp = try numericDate("exp") else { throw AuthError(.malformed) }
        let nbf = try numericDate("nbf")
        guard let iat = try numericDate("iat") else { throw AuthError(.malformed) }
        guard let iss = claims["iss"]?.stringValue, issuers.contains(iss) else { throw AuthError(.wrongIssuer) }
        switch claims["aud"] {
        case .string(let aud)? where aud == audience: break
        case .array(let auds)? where auds.contains(.string(audience)): break
        default: throw AuthError(.wrongAudience)
        }
        guard let sub = claims["sub"]?.stringValue, UserIdPattern.isWellFormed(sub) else { throw AuthError(.invalidSubject) }
        return SignedClaims(
            subject: sub, issuer: iss, expiresAt: exp, notBefore: nbf, issuedAt: iat, email: claims["email"]?.stringValue,
            emailVerified: claims["email_verified"] == .bool(true) || claims["email_verified"] == .string("true"))
    }

    /// A token whose signature and clock-free claims verified; its times are judged per use.
    struct SignedClaims: Sendable, Equatable {
        var subject: String
        var issuer: String
        /// NumericDate seconds (`exp`, `nbf`, `iat`), within 1970…9999.
        var expiresAt: Int64
        var notBefore: Int64?
        var issuedAt: Int64
        var email: String? = nil
        var emailVerified = false

        func validated(at now: Timestamp, leewaySeconds: Int64) throws(AuthError) -> VerifiedIDToken {
            let nowSeconds = now.millisecondsSinceEpoch / 1000
            guard nowSeconds < expiresAt + leewaySeconds else { throw AuthError(.expired) }
            if let notBefore { guard notBefore <= nowSeconds + leewaySeconds else { throw AuthError(.notYetValid) } }
            guard issuedAt <= nowSeconds + leewaySeconds else { throw AuthError(.notYetValid) }
            return VerifiedIDToken(
                subject: subject, issuer: issuer, expiresAt: Timestamp(secondsSinceEpoch: expiresAt), email: email,
                emailVerified: emailVerified)
        }
    }

    /// SHA-256 of a token: the cache key, so the cache holds no token and looking one up
    /// compares digests, not the bearer secret itself.
    struct TokenDigest: Hashable, Sendable {
        var words: (UInt64, UInt64, UInt64, UInt64)
        /// The key set's generation the token verified under.
        var generation: Int

        init(_ token: some StringProtocol, generation: Int = 0) {
            let d = SHA256.hash(Array(token.utf8))
            func word(_ i: Int) -> UInt64 { (0..<8).reduce(0) { $0 << 8 | UInt64(d[i * 8 + $1]) } }
            words = (word(0), word(1), word(2), word(3))
            self.generation = generation
        }

        static func == (a: Self, b: Self) -> Bool { a.words == b.words && a.generation == b.generation }
        func hash(into hasher: inout Hasher) {
            hasher.combine(generation)
            hasher.combine(words.0)
            hasher.combine(words.1)
            hasher.combine(words.2)
            hasher.combine(words.3)
        }
    }
}
