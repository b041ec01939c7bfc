/// Why a bearer token was refused. Every reason answers 401; `reason` is a stable code for
/// logs and the error message, never token content.
public struct AuthError: Error, Sendable, Equatable, CustomStringConvertible {
    public enum Reason: String, Sendable {
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
    }

    public let reason: Reason
    public init(_ reason: Reason) { self.reason = reason }

    public var description: String {
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
        }
    }
}

/// The claims FCGIBilling uses from a verified token.
public struct VerifiedIDToken: Sendable, Equatable {
    public let subject: String
    public let issuer: String
    public let expiresAt: Timestamp
}

/// Verifies app ID tokens (SPEC §3): RS256 or ES256 only, the key chosen by `kid` and of the
/// algorithm's own type (an RSA key never verifies an ES256 token, nor the reverse; HS* and
/// `none` are refused before any key is looked at); `iss`, `aud`, `exp`, `nbf`, `iat`
/// checked with `leewaySeconds`; `sub` a non-empty id of at most 128 bytes.
public struct IDTokenVerifier: Sendable {
    public let keys: TokenKeySet
    public let issuer: String
    public let audience: String
    public let leewaySeconds: Int64

    public init(keys: TokenKeySet, issuer: String, audience: String, leewaySeconds: Int) {
        self.keys = keys
        self.issuer = issuer
        self.audience = audience
        self.leewaySeconds = Int64(min(max(leewaySeconds, 0), 86_400))
    }

    /// 9999-12-31T23:59:59Z: the largest `exp`, `nbf` or `iat` accepted.
    static let maxNumericDate: Int64 = 253_402_300_799

    public func verify(_ token: some StringProtocol, now: Timestamp) throws(AuthError) -> VerifiedIDToken {
        let jws: CompactJWS
        do { jws = try CompactJWS.parse(token, maxBytes: 8192) } catch { throw AuthError(.malformed) }
        let algorithm = jws.algorithm
        guard algorithm == "RS256" || algorithm == "ES256" else { throw AuthError(.unsupportedAlgorithm) }
        guard jws.header["crit"] == nil else { throw AuthError(.unsupportedAlgorithm) }
        guard let kid = jws.header["kid"]?.stringValue, let key = keys.keys[kid] else { throw AuthError(.unknownKey) }

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
        let nowSeconds = now.millisecondsSinceEpoch / 1000
        // NumericDate claims are bounded to years 1970…9999 before any arithmetic: a signed
        // `exp` near Int64.max overflowed `exp + leeway` and `Timestamp(secondsSinceEpoch:)`
        // and trapped, killing the worker process (found by scripts/fuzz, target idtoken).
        func numericDate(_ name: String) throws(AuthError) -> Int64? {
            guard let value = claims[name] else { return nil }
            guard let seconds = value.int64Value, (0...Self.maxNumericDate).contains(seconds) else { throw AuthError(.malformed) }
            return seconds
        }
        guard let exp = try numericDate("exp") else { throw AuthError(.malformed) }
        guard nowSeconds < exp + leewaySeconds else { throw AuthError(.expired) }
        if let nbf = try numericDate("nbf") {
            guard nbf <= nowSeconds + leewaySeconds else { throw AuthError(.notYetValid) }
        }
        guard let iat = try numericDate("iat") else { throw AuthError(.malformed) }
        guard iat <= nowSeconds + leewaySeconds else { throw AuthError(.notYetValid) }
        guard let iss = claims["iss"]?.stringValue, iss == issuer else { throw AuthError(.wrongIssuer) }
        switch claims["aud"] {
        case .string(let aud)? where aud == audience: break
        case .array(let auds)? where auds.contains(.string(audience)): break
        default: throw AuthError(.wrongAudience)
        }
        guard let sub = claims["sub"]?.stringValue, !sub.isEmpty, sub.utf8.count <= 128,
              !sub.utf8.contains(where: { $0 < 0x20 }) else { throw AuthError(.invalidSubject) }
        return VerifiedIDToken(subject: sub, issuer: iss, expiresAt: Timestamp(secondsSinceEpoch: exp))
    }
}
