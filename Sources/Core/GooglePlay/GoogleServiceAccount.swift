import Synchronization

/// The service account that reads the Play Developer API (SPEC §18), from Google's JSON key
/// file (`google.serviceAccountFile`: `{"type": "service_account", "client_email",
/// "private_key" (PKCS#8 PEM, RSA), "private_key_id", "token_uri", ...}`), and the OAuth 2
/// access tokens it is given: a JWT-bearer grant (RFC 7523) signed RS256 —
/// header `{alg: RS256, typ: JWT, kid: private_key_id}`, claims `iss` = `client_email`,
/// `scope` androidpublisher, `aud` = the token URL, `iat`, `exp` = `iat` + 3600 — posted to
/// `google.tokenUrl`, answered `{access_token, expires_in, token_type: Bearer}`. A token is
/// kept until a minute before it expires; one thread fetches while the others wait for it.
/// The key and the tokens are credentials: never logged, never in an error.
final class GoogleServiceAccount: Sendable {
    static let scope = "https://www.googleapis.com/auth/androidpublisher"
    static let assertionLifetimeSeconds: Int64 = 3600
    /// A cached token is renewed this long before Google's `expires_in` says it ends.
    static let renewBeforeSeconds: Int64 = 60

    let clientEmail: String
    let keyId: String?
    let tokenURL: String
    private let key: PrivateKey
    private let http: CurlHTTPClient
    private let cached = Mutex<(token: String, expiresAt: Timestamp)?>(nil)
    private let fetching = Mutex<Void>(())

    init(clientEmail: String, keyId: String?, key: PrivateKey, tokenURL: String, http: CurlHTTPClient) {
        self.clientEmail = clientEmail
        self.keyId = keyId
        self.key = key
        self.tokenURL = tokenURL
        self.http = http
    }

    /// The service account of `google.*`; nil without `serviceAccountFile`. A file that is
    /// not a service account key is a start-up error (which never quotes the key).
    static func load(_ google: BillingConfiguration.Google, http: CurlHTTPClient? = nil) throws(ConfigurationError) -> GoogleServiceAccount? {
        guard let path = google.serviceAccountFile, !path.isEmpty else { return nil }
        let setting = "google.serviceAccountFile"
        let document: JSON
        do { document = try JSON.parse(try FileIO.read(path, maxBytes: 64 << 10)) } catch {
            throw ConfigurationError("\(setting): \(path): not a readable JSON key file")
        }
        guard document["type"]?.stringValue == "service_account", let email = document["client_email"]?.stringValue,
            !email.isEmpty, let pem = document["private_key"]?.stringValue
        else {
            throw ConfigurationError("\(setting): \(path): expected Google's service account key (type service_account, client_email, private_key)")
        }
        let key: PrivateKey
        do {
            key = try PrivateKey(pem: pem)
            guard case .rsa = try key.publicKey.kind else {
                throw ConfigurationError("\(setting): \(path): private_key is not an RSA key")
            }
        } catch let error as ConfigurationError {
            throw error
        } catch {
            throw ConfigurationError("\(setting): \(path): private_key is not a PEM private key")
        }
        // The API's own transport (timeouts, `caFile`): the token endpoint is called as it is.
        let transport: CurlHTTPClient
        if let http { transport = http } else { transport = try ProviderAPIClient(google.client, name: "google", errorCodeMember: "code").http }
        return GoogleServiceAccount(
            clientEmail: email, keyId: document["private_key_id"]?.stringValue, key: key, tokenURL: google.tokenUrl, http: transport)
    }

    /// The signed JWT the token endpoint exchanges.
    func assertion(now: Timestamp) throws(CryptoError) -> String {
        let issuedAt = now.secondsSinceEpoch
        let claims: JSON = [
            "iss": .string(clientEmail), "scope": .string(Self.scope), "aud": .string(tokenURL),
            "iat": .int(issuedAt), "exp": .int(issuedAt + Self.assertionLifetimeSeconds),
        ]
        return try CompactJWS.sign(payload: claims, header: keyId.map { ["kid": .string($0)] } ?? [:], key: key, algorithm: "RS256")
    }

    /// A valid access token: the cached one, or a new one from the token endpoint.
    func accessToken(now: Timestamp) throws(ProviderAPIError) -> String {
        if let token = usable(now: now) { return token }
        // One fetch at a time; whoever waited finds the fresh token.
        return try fetching.withLock { _ throws(ProviderAPIError) -> String in
            if let token = usable(now: now) { return token }
            let (token, expiresIn) = try fetch(now: now)
            cached.withLock { $0 = (token, now.adding(seconds: max(0, expiresIn - Self.renewBeforeSeconds))) }
            return token
        }
    }

    /// Forgets the cached token (Google answered 401 to it).
    func invalidate() { cached.withLock { $0 = nil } }

    private func usable(now: Timestamp) -> String? {
        cached.withLock { entry in entry.flatMap { now < $0.expiresAt ? $0.token : nil } }
    }

    private func fetch(now: Timestamp) throws(ProviderAPIError) -> (String, Int64) {
        let jwt: String
        do { jwt = try assertion(now: now) } catch { throw ProviderAPIError(.signing, detail: "the service account's JWT") }
        let form = "grant_type=" + ProviderAPIClient.percentEncoded("urn:ietf:params:oauth:grant-type:jwt-bearer") + "&assertion=" + jwt
        let response: HTTPClientResponse
        do {
            response = try http.post(
                tokenURL, headers: ["Content-Type: application/x-www-form-urlencoded", "Accept: application/json"], body: Array(form.utf8))
        } catch {
            throw ProviderAPIError(.transport, detail: (error.isTimeout ? "timeout: " : "") + "token endpoint: " + error.message)
        }
        guard response.status == 200 else {
            // Google's `{"error": "invalid_grant", "error_description": ...}`: the status is enough.
            throw ProviderAPIError(.status, status: response.status, detail: "token endpoint")
        }
        guard let answer = try? JSON.parse(response.body), let token = answer["access_token"]?.stringValue, !token.isEmpty,
            let expiresIn = answer["expires_in"]?.int64Value, expiresIn > 0
        else {
            throw ProviderAPIError(.malformedResponse, status: 200, detail: "token endpoint: no access_token and expires_in")
        }
        return (token, expiresIn)
    }
}
