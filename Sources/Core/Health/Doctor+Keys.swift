import Glibc

/// The doctor's checks of keys and trust roots: ID-token keys (file or issuer URL), the App Store
/// roots and API key, the entitlement signing keys and the offer signing key.
extension Doctor {
    func tokenKeys(_ configuration: BillingConfiguration) -> Check {
        if let url = configuration.auth.keysUrl { return issuerKeys(configuration, url: url) }
        guard let path = configuration.auth.keysFile else {
            return Check(
                name: "token keys", ok: false,
                detail: "neither auth.keysUrl nor auth.keysFile is set: every authenticated route answers 501",
                fix: "set auth.keysUrl (the issuer's published keys), auth.issuer and auth.audience")
        }
        do {
            let keys = try TokenKeySet.load(path: path)
            let document = (try? JSON.parse(try FileIO.read(path, maxBytes: 1 << 20)))?.objectValue ?? [:]
            let expiries = document.compactMap { (kid, value) -> (String, Timestamp)? in
                value.stringValue.flatMap(CertificateExpiry.notAfter(pem:)).map { (kid, $0) }
            }
            if let soonest = expiries.min(by: { $0.1 < $1.1 }), soonest.1 < now.adding(seconds: expiryWarningSeconds),
                expiries.allSatisfy({ $0.1 < now.adding(seconds: expiryWarningSeconds) })
            {
                return Check(
                    name: "token keys", ok: false,
                    detail: "every certificate in \(path) expires by \(soonest.1.iso8601) (kid \(soonest.0) first)",
                    fix: "publish the provider's current keys into \(path) (the workers take them without a restart)")
            }
            return Check(
                name: "token keys", ok: true,
                detail: "\(keys.keys.count) key(s) in \(path)"
                    + (expiries.isEmpty ? "" : ", valid until \(expiries.map(\.1).max()!.iso8601)"), fix: nil)
        } catch {
            return Check(name: "token keys", ok: false, detail: "\(error)", fix: "write a JSON {kid: PEM} map or a JWKS to \(path)")
        }
    }

    /// `auth.keysUrl`: fetched once from here, and what the workers published of their own
    /// key sets (age, fetches failing in a row).
    func issuerKeys(_ configuration: BillingConfiguration, url: String) -> Check {
        let directory = MetricsDirectory.of(configuration)
        var ages: [Double] = []
        var failing: [String] = []
        for snapshot in directory.readAll(now: now) {
            for sample in snapshot.samples {
                if sample.name == "billing_auth_keys_age_seconds" { ages.append(sample.value) }
                if sample.name == "billing_auth_keys_consecutive_fetch_errors", sample.value > 0 {
                    failing.append("\(snapshot.worker) (\(Int(sample.value)) in a row)")
                }
            }
        }
        let workers = ages.isEmpty ? "" : "; the workers' sets are at most \(Int(ages.max()!)) s old"
        do {
            let (keys, _, maxAge) = try TokenKeyStore.download(TokenKeyStore.Issuer(configuration.auth, url: url))
            guard failing.isEmpty else {
                return Check(
                    name: "token keys", ok: false,
                    detail: "\(url) answers \(keys.keys.count) key(s) here, but fetches fail in \(failing.joined(separator: ", "))\(workers)",
                    fix: "read the workers' log (\"token keys not fetched\"): their network, auth.caFile, a proxy")
            }
            return Check(
                name: "token keys", ok: true,
                detail: "\(keys.keys.count) key(s) at \(url), fresh for \(maxAge) s\(workers)", fix: nil)
        } catch {
            return Check(
                name: "token keys", ok: false, detail: "\(error)\(workers) (the workers keep their last good keys)",
                fix: "check that this host reaches \(url) over HTTPS (DNS, firewall, auth.caFile)")
        }
    }

    func appleRoots(_ configuration: BillingConfiguration) -> Check {
        let apple = configuration.apple
        guard !apple.trustedRootsFiles.isEmpty else {
            return Check(
                name: "App Store roots", ok: false, detail: "apple.trustedRootsFiles is empty: the App Store routes answer 501",
                fix: "install Apple Root CA - G3 and list it in apple.trustedRootsFiles")
        }
        do {
            _ = try AppleSignedDataVerifier.load(apple)
            var expiring: [String] = []
            for path in apple.trustedRootsFiles {
                let bytes = (try? FileIO.read(path, maxBytes: 1 << 20)) ?? []
                let notAfter = CertificateExpiry.notAfter(der: bytes) ?? CertificateExpiry.notAfter(pem: String(decoding: bytes, as: UTF8.self))
                if let notAfter, notAfter < now.adding(seconds: expiryWarningSeconds) { expiring.append("\(path) (\(notAfter.iso8601))") }
            }
            if !expiring.isEmpty {
                return Check(
                    name: "App Store roots", ok: false, detail: "expiring: \(expiring.joined(separator: ", "))",
                    fix: "install Apple's current root certificate")
            }
            return Check(name: "App Store roots", ok: true, detail: "\(apple.trustedRootsFiles.count) root(s) load", fix: nil)
        } catch {
            return Check(name: "App Store roots", ok: false, detail: "\(error)", fix: "check apple.trustedRootsFiles and apple.bundleId")
        }
    }

    func appStoreKey(_ configuration: BillingConfiguration) -> Check {
        let api = configuration.apple.serverApi
        do {
            _ = try AppStoreServerAPIToken(
                issuerId: api.issuerId ?? "", keyId: api.keyId ?? "",
                bundleId: configuration.apple.bundleId ?? "", privateKeyPEM: api.privateKey ?? "",
                lifetimeSeconds: api.tokenLifetimeSeconds)
            return Check(name: "App Store API key", ok: true, detail: "key \(api.keyId ?? "?") loads (EC P-256)", fix: nil)
        } catch {
            return Check(
                name: "App Store API key", ok: false, detail: "\(error)",
                fix: "the In-App Purchase key (.p8) from App Store Connect, as apple.serverApi.privateKeyFile")
        }
    }

    /// `entitlements.signingKeyFiles`: every file an EC P-256 private key (ES256), no two alike.
    func entitlementKeys(_ entitlements: BillingConfiguration.Entitlements) -> Check {
        guard entitlements.isEnabled else {
            return Check(
                name: "entitlement keys", ok: true,
                detail: "off (entitlements.signingKeyFiles unset): ?signed=true and GET /billing/keys answer 501", fix: nil)
        }
        do {
            let keys = try SigningKeyRing(paths: entitlements.signingKeyFiles).current()
            return Check(
                name: "entitlement keys", ok: true,
                detail: "\(keys.keys.count) key(s), EC P-256 (ES256); kid \(keys.signing.kid) signs, tokens valid up to "
                    + "\(entitlements.offlineSeconds) s", fix: nil)
        } catch {
            return Check(
                name: "entitlement keys", ok: false, detail: "\(error)",
                fix: "openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out FILE (mode 0600), one file per key")
        }
    }

    /// The In-App Purchase key that signs App Store offers (`apple.inAppKey`, else `apple.serverApi`).
    func offerKey(_ apple: BillingConfiguration.Apple) -> Check {
        do {
            guard let signer = try AppleOfferSigner.load(apple) else {
                return Check(
                    name: "offer signing key", ok: true,
                    detail: "off (no apple.inAppKey, apple.serverApi key or apple.bundleId): offer signatures answer 501", fix: nil)
            }
            let source = apple.inAppKey.isConfigured ? "apple.inAppKey" : "apple.serverApi"
            return Check(
                name: "offer signing key", ok: true, detail: "\(source) key \(signer.keyId) loads (EC P-256) for \(signer.bundleId)", fix: nil)
        } catch {
            return Check(
                name: "offer signing key", ok: false, detail: "\(error)",
                fix: "the In-App Purchase key (.p8) from App Store Connect, as apple.inAppKey.privateKeyFile")
        }
    }
}
