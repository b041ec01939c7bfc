import Glibc
import Testing

@testable import Core

/// What the server signs (SPEC §17), its pure parts: the entitlement token's claims (the
/// access's end over every combination of sources, the offline bound), its ES256 signature
/// under the `kid` of RFC 7638; the signing key ring (rotation by file and by list, a
/// broken file keeping the keys in force); Apple's offer signatures (claims, header, the
/// version-1 payload) and the configuration keys.
@Suite struct EntitlementTokenTests {
    static let now = Timestamp(secondsSinceEpoch: 1_800_000_000)
    static func hours(_ h: Int64) -> Timestamp { now.adding(seconds: h * 3600) }

    func signer(offline: Int = 259_200, files: [String]) throws -> EntitlementTokenSigner {
        EntitlementTokenSigner(keys: try SigningKeyRing(paths: files), issuer: "https://billing.test", offlineSeconds: offline)
    }

    func snapshot(store expires: Timestamp?, overlays: [AccessSnapshot.AccessSource] = [], tier: Tier = .plus) -> AccessSnapshot {
        let projection =
            expires.map { end in
                StoreProjection(subscriptions: [
                    SubscriptionState(
                        subscriptionId: "s1", provider: .revenuecat, productId: "plus.monthly", tier: tier, phase: .active,
                        willRenew: true, expiresAt: end, lastEventAt: Self.now.adding(seconds: -3600))
                ])
            } ?? .empty
        return AccessSnapshot(userId: "u-1", revision: 7, projection: projection, now: Self.now, overlays: overlays)
    }

    @Test func theAccessEndIsTheLatestEndAtTheTierAndNilWithoutOne() {
        let grant = { (tier: Tier, hours: Int64?) in
            AccessSnapshot.AccessSource(tier: tier, kind: "grant", expiresAt: hours.map(Self.hours))
        }
        // Every combination of a store period, a grant at the same or a lower or higher tier,
        // ending earlier, later or never.
        #expect(EntitlementTokenSigner.accessEnd(snapshot(store: nil)) == nil, "free")
        #expect(EntitlementTokenSigner.accessEnd(snapshot(store: Self.hours(10))) == Self.hours(10))
        #expect(EntitlementTokenSigner.accessEnd(snapshot(store: Self.hours(10), overlays: [grant(.plus, 20)])) == Self.hours(20))
        #expect(EntitlementTokenSigner.accessEnd(snapshot(store: Self.hours(30), overlays: [grant(.plus, 20)])) == Self.hours(30))
        #expect(EntitlementTokenSigner.accessEnd(snapshot(store: Self.hours(10), overlays: [grant(.plus, nil)])) == nil, "permanent")
        #expect(
            EntitlementTokenSigner.accessEnd(snapshot(store: Self.hours(10), overlays: [grant(.pro, 5)])) == Self.hours(5),
            "a pro grant decides: pro ends with it (plus goes on, in a later token)")
        #expect(
            EntitlementTokenSigner.accessEnd(snapshot(store: Self.hours(10), overlays: [grant(.free, nil)])) == Self.hours(10),
            "a lower source does not extend the tier")
        #expect(EntitlementTokenSigner.accessEnd(snapshot(store: nil, overlays: [grant(.pro, 2)])) == Self.hours(2))
    }

    @Test func claimsSayTheSnapshotAndValidUntilIsTheEarlierBound() throws {
        let (a, _) = try KeyFiles.pair()
        let tokens = try signer(offline: 86_400, files: [a])
        let short = tokens.claims(snapshot(store: Self.hours(10)))
        #expect(short["iss"] == "https://billing.test")
        #expect(short["sub"] == "u-1")
        #expect(short["tier"] == "plus")
        #expect(short["phase"] == "active")
        #expect(short["capabilities"] == .array([]))
        #expect(short["revision"]?.int64Value == 7)
        #expect(short["expiresAt"] == .string(Self.hours(10).iso8601))
        #expect(short["validUntil"] == .string(Self.hours(10).iso8601), "the access ends first")
        #expect(short["iat"]?.int64Value == 1_800_000_000)
        #expect(short["exp"]?.int64Value == Int64(1_800_036_000))
        let long = tokens.claims(snapshot(store: Self.hours(100)))
        #expect(long["validUntil"] == .string(Self.hours(24).iso8601), "the offline bound first")
        #expect(long["exp"]?.int64Value == Int64(1_800_086_400))
        let free = tokens.claims(snapshot(store: nil))
        #expect(free["tier"] == "free")
        #expect(free["expiresAt"] == .null)
        #expect(free["validUntil"] == .string(Self.hours(24).iso8601))
    }

    @Test func theTokenIsES256UnderTheThumbprintOfTheFirstKey() throws {
        let (a, b) = try KeyFiles.pair()
        let ring = try SigningKeyRing(paths: [a, b])
        let tokens = EntitlementTokenSigner(keys: ring, issuer: "i", offlineSeconds: 60)
        let jws = try CompactJWS.parse(try tokens.sign(snapshot(store: Self.hours(1))))
        let keys = ring.current()
        #expect(jws.header["alg"] == "ES256")
        #expect(jws.header["typ"] == "JWT")
        #expect(jws.header["kid"] == .string(keys.signing.kid))
        let der = try ECDSASignature.derFromRaw(jws.signature)
        #expect(try keys.keys[0].key.publicKey.verifySHA256(signature: der, message: jws.signingInput))
        #expect(!(try keys.keys[1].key.publicKey.verifySHA256(signature: der, message: jws.signingInput)))
        // The published set: both keys, public halves only, each with its kid.
        let published = keys.jwks["keys"]?.arrayValue ?? []
        #expect(published.map { $0["kid"] } == keys.keys.map { .string($0.kid) })
        #expect(published.allSatisfy { $0["d"] == nil && $0["alg"] == "ES256" && $0["use"] == "sig" && $0["crv"] == "P-256" })
        // RFC 7638: the kid is SHA-256 of {"crv","kty","x","y"} in that order.
        let jwk = keys.signing.jwk
        let canonical = "{\"crv\":\"P-256\",\"kty\":\"EC\",\"x\":\"\(jwk["x"]!.stringValue!)\",\"y\":\"\(jwk["y"]!.stringValue!)\"}"
        #expect(keys.signing.kid == Base64URL.encode(SHA256.hash(canonical)))
        #expect(keys.signing.kid.utf8.count == 43)
    }
}

/// Key files on disk, as an operator writes them.
enum KeyFiles {
    static func path(_ name: String) -> String {
        "/tmp/fcgibilling-signing-\(getpid())-\(UInt32.random(in: 0...UInt32.max))-\(name).pem"
    }

    static func write(_ text: String, to path: String) {
        let tmp = path + ".tmp"
        let fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC, 0o600)
        _ = text.withCString { Glibc.write(fd, $0, strlen($0)) }
        close(fd)
        rename(tmp, path)
    }

    static func key(_ name: String, _ key: PrivateKey? = nil) throws -> String {
        let path = path(name)
        write(try (key ?? PrivateKey.generateEC()).pem(), to: path)
        return path
    }

    static func pair() throws -> (String, String) { (try key("a"), try key("b")) }
}

@Suite struct SigningKeyRingTests {
    @Test func onlyDistinctP256PrivateKeysAreAccepted() throws {
        let a = try KeyFiles.key("a")
        let rsa = try KeyFiles.key("rsa", try PrivateKey.generateRSA())
        let p384 = try KeyFiles.key("p384", try PrivateKey.generateEC(curve: "secp384r1"))
        let garbage = KeyFiles.path("garbage")
        KeyFiles.write("-----BEGIN PRIVATE KEY-----\nnot a key\n-----END PRIVATE KEY-----\n", to: garbage)
        for (paths, message) in [
            ([rsa], "EC P-256"), ([p384], "EC P-256"), ([garbage], "not a PEM private key"), ([a, a], "the same key"),
            (["/nonexistent/key.pem"], "/nonexistent/key.pem"), ([], "no key file"),
        ] {
            #expect {
                _ = try SigningKeyRing(paths: paths)
            } throws: { error in
                "\(error)".contains(message) && "\(error)".contains("entitlements.signingKeyFiles")
            }
        }
        #expect(try SigningKeyRing(paths: [a]).current().keys.count == 1)
    }

    @Test func aChangedFileIsReadAgainAndABrokenOneKeepsTheKeysInForce() throws {
        let (a, b) = try KeyFiles.pair()
        let ring = try SigningKeyRing(paths: [a])
        let first = ring.current(nowMilliseconds: 0).signing.kid
        // The operator replaces the key in place: looked at once a second.
        KeyFiles.write(try PrivateKey.generateEC().pem(), to: a)
        #expect(ring.current(nowMilliseconds: 500).signing.kid == first, "not looked at again within the second")
        let replaced = ring.current(nowMilliseconds: 1000).signing.kid
        #expect(replaced != first)
        #expect(ring.generation == 1)
        // A half-written file: the keys in force stay, and SIGHUP says why.
        KeyFiles.write("-----BEGIN PRIVATE KEY-----\nMIGH", to: a)
        #expect(ring.current(nowMilliseconds: 2000).signing.kid == replaced)
        #expect(throws: ConfigurationError.self) { try ring.reload() }
        #expect(ring.current(nowMilliseconds: 3000).signing.kid == replaced)
        // Rotation by list (SIGHUP with the configuration read again): publish b, then sign with it.
        KeyFiles.write(try PrivateKey.generateEC().pem(), to: a)
        #expect(try ring.reload(paths: [a, b]))
        let published = ring.current(nowMilliseconds: 4000)
        #expect(published.keys.count == 2)
        let bKid = published.keys[1].kid
        #expect(try ring.reload(paths: [b, a]))
        #expect(ring.current(nowMilliseconds: 5000).signing.kid == bKid)
        #expect(ring.current(nowMilliseconds: 5000).keys.count == 2, "the old key is still published")
        #expect(try ring.reload(paths: [b]))
        #expect(ring.current(nowMilliseconds: 6000).keys.map(\.kid) == [bKid])
        #expect(!(try ring.reload(paths: [b])), "the same keys again: no change")
    }
}

@Suite struct AppleOfferSignerTests {
    static let now = Timestamp(millisecondsSinceEpoch: 1_800_000_000_123)
    static let key = try! PrivateKey.generateEC()
    let signer = AppleOfferSigner(issuerId: "issuer-1", keyId: "KEY123", bundleId: "com.example.app", key: Self.key)

    func verified(_ token: String) throws -> CompactJWS {
        let jws = try CompactJWS.parse(token)
        #expect(jws.header == ["alg": "ES256", "typ": "JWT", "kid": "KEY123"], "as Apple's library writes it")
        #expect(try Self.key.publicKey.verifySHA256(signature: try ECDSASignature.derFromRaw(jws.signature), message: jws.signingInput))
        return jws
    }

    @Test func aPromotionalOfferHasApplesClaims() throws {
        let jws = try verified(
            try signer.promotionalOffer(productId: "p.monthly", offerIdentifier: "save50", transactionId: "2000000001", now: Self.now))
        var claims = jws.payload.objectValue ?? [:]
        let nonce = claims["nonce"]?.stringValue ?? ""
        claims["nonce"] = nil
        #expect(
            claims == [
                "productId": "p.monthly", "offerIdentifier": "save50", "transactionId": "2000000001", "bid": "com.example.app",
                "iss": "issuer-1", "aud": "promotional-offer", "iat": .int(1_800_000_000),
            ])
        let groups = nonce.split(separator: "-", omittingEmptySubsequences: false).map(String.init)
        #expect(groups.map(\.count) == [8, 4, 4, 4, 12], "a UUID: \(nonce)")
        #expect(nonce.allSatisfy { "0123456789abcdef-".contains($0) })
        #expect(groups.count == 5 && groups[2].hasPrefix("4") && "89ab".contains(groups[3].first ?? "x"), "version 4, RFC 4122 variant")
        let without = try verified(try signer.promotionalOffer(productId: "p", offerIdentifier: "o", transactionId: nil, now: Self.now))
        #expect(without.payload["transactionId"] == nil, "omitted when no transaction is known")
        #expect(without.payload["nonce"] != .string(nonce), "a fresh nonce each time")
    }

    @Test func introductoryEligibilityHasApplesClaims() throws {
        for allow in [true, false] {
            let jws = try verified(
                try signer.introductoryOfferEligibility(productId: "p.yearly", allow: allow, transactionId: "7", now: Self.now))
            #expect(jws.payload["aud"] == "introductory-offer-eligibility")
            #expect(jws.payload["allowIntroductoryOffer"] == .bool(allow))
            #expect(jws.payload["transactionId"] == "7")
            #expect(jws.payload["productId"] == "p.yearly")
        }
    }

    @Test func theVersion1SignatureIsOverApplesJoinedFields() throws {
        let legacy = try signer.legacyPromotionalOffer(
            productId: "p.monthly", offerIdentifier: "save50", applicationUsername: "ABC-User", now: Self.now)
        #expect(legacy.timestamp == 1_800_000_000_123)
        let payload = ["com.example.app", "KEY123", "p.monthly", "save50", "abc-user", legacy.nonce, "1800000000123"]
            .joined(separator: "\u{2063}")
        #expect(try Self.key.publicKey.verifySHA256(signature: try Base64.decode(legacy.signature), message: Array(payload.utf8)))
    }

    @Test func theInAppKeyIsPreferredAndTheServerAPIKeyServesWithoutIt() throws {
        var apple = BillingConfiguration.Apple()
        #expect(try AppleOfferSigner.load(apple) == nil)
        apple.bundleId = "com.example.app"
        #expect(try AppleOfferSigner.load(apple) == nil)
        apple.serverApi.issuerId = "api-issuer"
        apple.serverApi.keyId = "APIKEY"
        apple.serverApi.privateKey = try PrivateKey.generateEC().pem()
        #expect(try AppleOfferSigner.load(apple)?.keyId == "APIKEY")
        apple.inAppKey.issuerId = "iap-issuer"
        apple.inAppKey.keyId = "IAPKEY"
        apple.inAppKey.privateKey = try PrivateKey.generateEC().pem()
        #expect(try AppleOfferSigner.load(apple)?.keyId == "IAPKEY")
        apple.inAppKey.privateKey = try PrivateKey.generateRSA().pem()
        #expect(throws: ConfigurationError.self) { _ = try AppleOfferSigner.load(apple) }
    }

    @Test func theConfigurationKeys() throws {
        let pem = try PrivateKey.generateEC().pem()
        let c = try BillingConfiguration(json: [
            "entitlements": ["signingKeyFiles": ["/etc/fcgibilling/entitlements-1.pem"], "issuer": "https://b", "offlineSeconds": 3600],
            "apple": ["inAppKey": ["issuerId": "i", "keyId": "K", "privateKey": .string(pem)]],
        ])
        #expect(c.entitlements.signingKeyFiles == ["/etc/fcgibilling/entitlements-1.pem"])
        #expect(c.entitlements.offlineSeconds == 3600)
        #expect(c.apple.inAppKey.isConfigured)
        #expect(BillingConfiguration().entitlements.offlineSeconds == 259_200)
        for bad: JSON in [
            ["entitlements": ["signingKeyFiles": ["relative.pem"]]], ["entitlements": ["offlineSeconds": 10]],
            ["entitlements": ["issuer": ""]], ["apple": ["inAppKey": ["keyId": "K"]]], ["entitlements": ["signingKeyFile": "/x"]],
        ] {
            #expect(throws: ConfigurationError.self) { _ = try BillingConfiguration(json: bad) }
        }
    }
}
