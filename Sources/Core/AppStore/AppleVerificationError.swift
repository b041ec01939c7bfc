/// Why App Store signed data (a StoreKit 2 transaction, renewal info or a notification's
/// `signedPayload`) was refused. `reason` is a stable machine-readable code: answered to the
/// caller, written to `billing_quarantine.reason`, never carrying payload content.
struct AppleVerificationError: Error, Sendable, Equatable, CustomStringConvertible {
    enum Reason: String, Sendable, CaseIterable {
        /// Not three base64url segments, or header/payload not JSON objects.
        case malformed = "malformed_jws"
        /// `alg` is not exactly ES256 (none, HS256, ES384, RS256, missing, ...).
        case unsupportedAlgorithm = "unsupported_algorithm"
        /// `x5c` missing, not exactly three entries, or an entry that is not base64 DER.
        case invalidChainLength = "invalid_chain_length"
        case invalidCertificate = "invalid_certificate"
        /// The chain does not verify up to a configured root at `signedDate` (strict mode):
        /// unknown root, broken signature, expired or not yet valid certificate, ...
        case untrustedChain = "untrusted_chain"
        /// The intermediate lacks 1.2.840.113635.100.6.2.1 or the leaf 1.2.840.113635.100.6.11.1.
        case missingAppleOID = "missing_apple_oid"
        /// The leaf key is not an EC P-256 key.
        case unexpectedKey = "unexpected_key"
        case badSignature = "bad_signature"
        case bundleMismatch = "bundle_mismatch"
        case appAppleIdMismatch = "app_apple_id_mismatch"
        /// `environment` missing or not one of `apple.environments`.
        case environmentNotAccepted = "environment_not_accepted"
        /// No trusted root is configured.
        case notConfigured = "not_configured"
        /// Signed by Apple, but no notification (no `notificationType`/`notificationUUID`: a
        /// transaction or renewal-info JWS posted to the webhook): 400, never stored.
        case notANotification = "not_a_notification"
    }

    /// The signature and chain verified under a configured root, but the data failed one of
    /// this server's settings (bundle id, app id, environment): fixing the setting makes it
    /// apply, so such a delivery is kept in the quarantine. Every other reason is a delivery
    /// nothing can make verify: refused and never stored (SPEC §5, §13).
    var isSettingMismatch: Bool {
        switch reason {
        case .bundleMismatch, .appAppleIdMismatch, .environmentNotAccepted: return true
        default: return false
        }
    }

    let reason: Reason
    /// Short server-written explanation (e.g. OpenSSL's verify error string); never payload text.
    let detail: String?
    /// For a setting mismatch of a notification: its verified `notificationUUID` and
    /// `notificationType` (the quarantine keeps one row per notification, SPEC §19).
    var notificationUUID: String?
    var notificationType: String?

    init(_ reason: Reason, _ detail: String? = nil) {
        self.reason = reason
        self.detail = detail
    }

    var description: String {
        "App Store signed data refused: \(reason.rawValue)" + (detail.map { " (\($0))" } ?? "")
    }
}
