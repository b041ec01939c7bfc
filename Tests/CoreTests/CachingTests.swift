import Testing

@testable import Core

/// The pieces the access route's caches are made of: the bounded map, the verified-token
/// cache (which must never skip a time check), the record → snapshot judgement at an
/// instant, and the cached usage lookup. The caches' coherence with the database is tested
/// against MariaDB in IntegrationTests/SnapshotCacheTests.
@Suite struct CachingTests {
    // MARK: BoundedCache

    @Test func boundedCacheKeepsRecentlyUsedKeysAndStaysBounded() {
        let cache = BoundedCache<String, Int>(capacity: 2)
        cache.store(1, for: "a")
        cache.store(2, for: "b")
        cache.store(3, for: "c")  // young was full: {a, b} become old, young = {c}
        #expect(cache["a"] == 1)  // promoted back to young: {c, a}
        cache.store(4, for: "d")  // young full again: old = {c, a}, young = {d}; b is gone
        #expect(cache["b"] == nil)
        #expect(cache["a"] == 1 && cache["c"] == 3 && cache["d"] == 4)
        for i in 0..<100 { cache.store(i, for: "k\(i)") }
        #expect(cache.count <= 4)
        #expect(cache["k99"] == 99 && cache["k98"] == 98)
        cache.store(7, for: "k99")
        #expect(cache["k99"] == 7)
        cache.remove("k99")
        #expect(cache["k99"] == nil)
    }

    @Test func boundedCacheOfCapacityZeroHoldsNothing() {
        let cache = BoundedCache<String, Int>(capacity: 0)
        cache.store(1, for: "a")
        #expect(cache["a"] == nil && cache.count == 0)
    }

    // MARK: Verified tokens

    static let key = try! PrivateKey.generateEC()
    static let now = Timestamp(secondsSinceEpoch: 1_800_000_000)

    static func token(sub: String = "6f1c1a8e-8a4e-4f37-9a44-1d2b3c4d5e6f", exp: Int64 = 1_800_000_600, nbf: Int64? = nil) throws -> String {
        var claims: JSONObject = [
            "sub": .string(sub), "iss": "https://issuer.test", "aud": "billing-app", "exp": .int(exp),
            "iat": .int(1_799_999_000),
        ]
        if let nbf { claims["nbf"] = .int(nbf) }
        return try CompactJWS.sign(payload: .object(claims), header: ["kid": "ec-1"], key: key, algorithm: "ES256")
    }

    static func verifier(cached: Int) throws -> IDTokenVerifier {
        IDTokenVerifier(
            keys: TokenKeySet(keys: ["ec-1": try key.publicKey]), issuer: "https://issuer.test", audience: "billing-app",
            leewaySeconds: 0, cachedTokens: cached)
    }

    @Test func aCachedTokenIsStillJudgedAgainstTheClock() throws {
        let verifier = try Self.verifier(cached: 16)
        let token = try Self.token(nbf: 1_799_999_500)
        #expect(try verifier.verify(token, now: Self.now).subject == "6f1c1a8e-8a4e-4f37-9a44-1d2b3c4d5e6f")
        #expect(verifier.verified?.count == 1)
        // Served from the cache from now on, yet expiry and nbf still apply.
        #expect(throws: AuthError(.expired)) { try verifier.verify(token, now: Timestamp(secondsSinceEpoch: 1_800_000_600)) }
        #expect(throws: AuthError(.notYetValid)) { try verifier.verify(token, now: Timestamp(secondsSinceEpoch: 1_799_999_000)) }
        #expect(try verifier.verify(token, now: Self.now).expiresAt == Timestamp(secondsSinceEpoch: 1_800_000_600))
    }

    @Test func onlyVerifiedTokensAreCachedAndEachUnderItsOwnDigest() throws {
        let verifier = try Self.verifier(cached: 16)
        let good = try Self.token()
        let other = try Self.token(sub: "0a1b2c3d-0000-4000-8000-000000000001")
        var forged = Array(good.utf8)
        forged[forged.count - 3] = forged[forged.count - 3] == UInt8(ascii: "A") ? UInt8(ascii: "B") : UInt8(ascii: "A")
        let forgedToken = String(decoding: forged, as: UTF8.self)
        for _ in 0..<2 {
            #expect(throws: AuthError(.badSignature)) { try verifier.verify(forgedToken, now: Self.now) }
        }
        #expect(verifier.verified?.count == 0)
        #expect(try verifier.verify(good, now: Self.now).subject == "6f1c1a8e-8a4e-4f37-9a44-1d2b3c4d5e6f")
        #expect(try verifier.verify(other, now: Self.now).subject == "0a1b2c3d-0000-4000-8000-000000000001")
        #expect(throws: AuthError(.badSignature)) { try verifier.verify(forgedToken, now: Self.now) }
        #expect(verifier.verified?.count == 2)
    }

    @Test func cachingDoesNotChangeAnyVerdict() throws {
        let cached = try Self.verifier(cached: 4)
        let uncached = try Self.verifier(cached: 0)
        let tokens = [
            try Self.token(), try Self.token(exp: 1_799_999_999), try Self.token(sub: ""), "not.a.token",
            try Self.token(nbf: 1_800_000_100),
        ]
        func verdict(_ v: IDTokenVerifier, _ t: String, _ now: Timestamp) -> String {
            do { return try v.verify(t, now: now).subject } catch { return error.reason.rawValue }
        }
        for now in [Self.now, Timestamp(secondsSinceEpoch: 1_800_000_200), Self.now, Timestamp(secondsSinceEpoch: 1_900_000_000)] {
            for token in tokens + tokens.reversed() {
                #expect(verdict(cached, token, now) == verdict(uncached, token, now))
            }
        }
    }

    // MARK: Record → snapshot

    static let t0 = Timestamp(CivilDateTime(year: 2026, month: 3, day: 1))
    static func at(hours: Int64) -> Timestamp { t0.adding(milliseconds: hours * 3_600_000) }

    @Test func aRecordIsJudgedAtEachInstant() {
        let subscription = SubscriptionState(
            subscriptionId: "otx-1", provider: .revenuecat, environment: .production,
            productId: "app.plus.monthly", tier: .plus, phase: .active, willRenew: true,
            expiresAt: Self.at(hours: 10), lastEventAt: Self.t0)
        let record = AccessRecord(
            userId: "u", revision: 3, version: 42, unclaimed: false, userCreatedAt: Self.t0, subscriptions: [subscription],
            overlays: [
                .init(source: .init(tier: .pro, kind: "grant", expiresAt: Self.at(hours: 20)), startsAt: Self.at(hours: 5)),
                .init(source: .init(tier: .plus, kind: "campaign", expiresAt: nil, campaign: "early"), startsAt: nil),
            ],
            loadedAt: Self.t0)
        let cadence: (String) -> Cadence? = { Cadence.inferred(fromProductId: $0) }
        let early = AccessSnapshot(record: record, now: Self.at(hours: 1), cadence: cadence)
        #expect(early.tier == .plus && early.source == "store" && early.sources.map(\.kind) == ["store", "campaign"])
        #expect(early.storeCadence == .monthly && early.revision == 3 && early.userCreatedAt == Self.t0)
        let granted = AccessSnapshot(record: record, now: Self.at(hours: 6), cadence: cadence)
        #expect(granted.tier == .pro && granted.source == "grant")
        let storeOver = AccessSnapshot(record: record, now: Self.at(hours: 12), cadence: cadence)
        #expect(storeOver.tier == .pro && storeOver.sources.map(\.kind) == ["grant", "campaign"])
        let grantOver = AccessSnapshot(record: record, now: Self.at(hours: 21), cadence: cadence)
        #expect(grantOver.tier == .plus && grantOver.source == "campaign" && grantOver.phase == .active)
    }

    @Test func cachedUsageAnswersOnlyForTheWindowsItWasReadFor() {
        let week = QuotaWindow(start: Self.t0, end: Self.at(hours: 168))
        let day = QuotaWindow(start: Self.t0, end: Self.at(hours: 24))
        let record = AccessRecord(
            userId: "u", revision: 0, version: 1, unclaimed: false, userCreatedAt: Self.t0,
            subscriptions: [], overlays: [], loadedAt: Self.t0)
        let entry = SnapshotCache.Entry(
            record: record, windows: [("recurringGeneration", week), ("explorePlaybackMinutes", day)],
            used: ["recurringGeneration": 2])
        #expect(
            entry.used(in: [("recurringGeneration", week), ("explorePlaybackMinutes", day)])
                == ["recurringGeneration": 2, "explorePlaybackMinutes": 0])
        let nextDay = QuotaWindow(start: Self.at(hours: 24), end: Self.at(hours: 48))
        #expect(entry.used(in: [("recurringGeneration", week), ("explorePlaybackMinutes", nextDay)]) == nil)
        #expect(entry.used(in: [("fileUploads", week)]) == nil)
    }

    @Test func cadenceIsInferredFromTheProductIdInAnyCase() {
        #expect(Cadence.inferred(fromProductId: "app.PLUS.Monthly") == .monthly)
        #expect(Cadence.inferred(fromProductId: "pro_weekly") == .weekly)
        #expect(Cadence.inferred(fromProductId: "pro.ANNUAL.2026") == .yearly)
        #expect(Cadence.inferred(fromProductId: "pro.year") == .yearly)
        #expect(Cadence.inferred(fromProductId: "Lifetime") == .lifetime)
        #expect(Cadence.inferred(fromProductId: "pro") == nil)
        #expect(Cadence.inferred(fromProductId: "") == nil)
        #expect(Cadence.inferred(fromProductId: "wee") == nil)
    }

    // MARK: Rendered snapshots

    private static func paying(expires: Timestamp) -> StoreProjection {
        StoreProjection(subscriptions: [
            SubscriptionState(
                subscriptionId: "s1", provider: .revenuecat, productId: "pro.monthly",
                tier: .pro, phase: .active, willRenew: true, expiresAt: expires,
                lastEventAt: now)
        ])
    }

    /// Every answer is byte for byte jansson's text of the snapshot at its own instant,
    /// whether it was rendered or reused; a reuse happens only when nothing but the time
    /// changed, and any other change (expiry passing, a new revision, a balance) renders anew.
    @Test func renderedSnapshotIsReusedOnlyWhenNothingButTheTimeChanged() {
        let cache = SnapshotCache(capacity: 10)
        let expires = Self.now.adding(seconds: 60)
        func snapshot(at seconds: Int64, revision: UInt64 = 1) -> AccessSnapshot {
            AccessSnapshot(
                userId: "u", revision: revision, projection: Self.paying(expires: expires),
                now: Self.now.adding(seconds: seconds).adding(milliseconds: seconds * 7))
        }
        for (seconds, revision) in [(0, 1), (1, 1), (1, 1), (2, 2), (30, 2), (61, 2), (62, 2), (70, 3)] as [(Int64, UInt64)] {
            let s = snapshot(at: seconds, revision: revision)
            #expect(cache.body(for: s) == s.json.serialized(), "at +\(seconds) s, revision \(revision)")
        }
        // Direct: a later read that answers alike is reused, with the new time in place; one
        // past the expiry (phase, tier, willRenew differ), another revision, another user
        // (byte for byte: canonically equivalent ids are different users) are not.
        let first = snapshot(at: 0)
        let later = snapshot(at: 30)
        let lapsed = snapshot(at: 61)
        let rendered = RenderedSnapshot(first)
        #expect(rendered.body == first.json.serialized())
        #expect(rendered.body(for: later) == later.json.serialized())
        #expect(rendered.body(for: lapsed) == nil)
        var other = later
        other.revision = 9
        #expect(rendered.body(for: other) == nil)
        let nfc = RenderedSnapshot(AccessSnapshot(userId: "caf\u{E9}", revision: 1, projection: Self.paying(expires: expires), now: Self.now))
        let nfd = AccessSnapshot(userId: "cafe\u{301}", revision: 1, projection: Self.paying(expires: expires), now: Self.now.adding(seconds: 1))
        #expect(nfc.snapshot.userId == nfd.userId && nfc.body(for: nfd) == nil)
    }
}
