/// Keys a setting names: read at start-up, so a wrong one is a configuration error there.
extension PrivateKey {
    /// An EC P-256 private key from PEM (an App Store Connect `.p8`, an ES256 signing key);
    /// anything else is a configuration error of `setting`, found at start-up. The error
    /// never carries the key.
    static func p256(pem: String, setting: String) throws(ConfigurationError) -> PrivateKey {
        let key: PrivateKey
        do {
            key = try PrivateKey(pem: pem)
            guard case .ec("prime256v1") = try key.publicKey.kind else {
                throw ConfigurationError("\(setting): expected an EC P-256 key (the In-App Purchase .p8)")
            }
        } catch let error as ConfigurationError {
            throw error
        } catch {
            throw ConfigurationError("\(setting): not a PEM private key")
        }
        return key
    }
}
