import Testing

@testable import Core

private let t0 = Timestamp(iso8601: "2026-03-01T00:00:00Z")!
private func at(_ hours: Int64) -> Timestamp { t0.adding(seconds: hours * 3600) }

private func grant(starts: Timestamp = at(0), expires: Timestamp? = at(48), revoked: Timestamp? = nil, tier: Tier = .plus) -> Grant {
    Grant(
        id: 1, userId: "u", tier: tier, startsAt: starts, expiresAt: expires, reason: "r", campaign: nil,
        idempotencyKey: "k", grantedBy: "ops", createdAt: at(0), revokedAt: revoked, revokedBy: revoked.map { _ in "ops" })
}

@Suite struct GrantStatusTests {
    @Test func windowDecidesStartInclusiveExpiryExclusive() {
        let g = grant(starts: at(10), expires: at(20))
        #expect(g.status(at: at(9)) == .scheduled)
        #expect(g.status(at: at(10)) == .active)
        #expect(g.status(at: at(19)) == .active)
        #expect(g.status(at: at(20)) == .expired)
    }

    @Test func permanentGrantNeverExpires() {
        #expect(grant(expires: nil).status(at: at(100_000)) == .active)
    }

    @Test func revocationWinsOverEveryWindow() {
        #expect(grant(starts: at(10), revoked: at(1)).status(at: at(0)) == .revoked)
        #expect(grant(revoked: at(1)).status(at: at(5)) == .revoked)
        #expect(grant(revoked: at(1)).source(at: at(5)) == nil)
    }

    @Test func fingerprintSeparatesRetriesFromReusedKeys() {
        let base = GrantRequest(userId: "u", tier: .plus, startsAt: nil, expiresAt: at(5), reason: "r", campaign: nil, idempotencyKey: "k")
        var other = base
        #expect(base.fingerprint == other.fingerprint)
        other.tier = .pro
        #expect(base.fingerprint != other.fingerprint)
        other = base
        other.startsAt = at(0)
        #expect(base.fingerprint != other.fingerprint)
    }
}

@Suite struct OverlayTests {
    private func payingPro(expires: Timestamp = at(24 * 30)) -> StoreProjection {
        StoreProjection(subscriptions: [
            SubscriptionState(
                subscriptionId: "s1", provider: .revenuecat, productId: "pro.monthly",
                tier: .pro, phase: .active, willRenew: true, expiresAt: expires,
                lastEventAt: at(0))
        ])
    }

    @Test func plusGrantNeverDemotesAPayingPro() {
        let snapshot = AccessSnapshot(
            userId: "u", revision: 1, projection: payingPro(), now: at(1),
            overlays: [grant().source(at: at(1))!])
        #expect(snapshot.tier == .pro)
        #expect(snapshot.source == "store")
        #expect(snapshot.sources.map(\.kind) == ["store", "grant"])
        #expect(snapshot.phase == .active)
    }

    @Test func storeTierShowsAgainWhenTheGrantEnds() {
        let plus = StoreProjection(subscriptions: [
            SubscriptionState(
                subscriptionId: "s1", provider: .revenuecat, tier: .plus,
                phase: .active, expiresAt: at(1000), lastEventAt: at(0))
        ])
        let g = grant(expires: at(5), tier: .pro)
        let during = AccessSnapshot(userId: "u", revision: 1, projection: plus, now: at(4), overlays: [g.source(at: at(4))].compactMap { $0 })
        #expect((during.tier, during.source) == (.pro, "grant"))
        let after = AccessSnapshot(userId: "u", revision: 1, projection: plus, now: at(5), overlays: [g.source(at: at(5))].compactMap { $0 })
        #expect((after.tier, after.source) == (.plus, "store"))
    }

    @Test func storeGrantAndCampaignOrderedByTierThenKind() {
        let campaign = AccessSnapshot.AccessSource(tier: .pro, kind: "campaign", expiresAt: nil, campaign: "early")
        let plusGrant = AccessSnapshot.AccessSource(tier: .plus, kind: "grant", expiresAt: at(3))
        let snapshot = AccessSnapshot(userId: "u", revision: 1, projection: payingPro(), now: at(1), overlays: [plusGrant, campaign])
        #expect(snapshot.sources.map(\.kind) == ["store", "campaign", "grant"])
        #expect(snapshot.source == "store")
        let lapsed = AccessSnapshot(userId: "u", revision: 1, projection: payingPro(expires: at(0)), now: at(1), overlays: [plusGrant, campaign])
        #expect((lapsed.tier, lapsed.source, lapsed.phase) == (.pro, "campaign", .active))
    }

    @Test func noSourceIsFree() {
        let snapshot = AccessSnapshot(userId: "u", revision: 0, projection: .empty, now: at(0))
        #expect((snapshot.tier, snapshot.source, snapshot.phase) == (.free, "none", .none))
    }
}

@Suite struct AdminHelpersTests {
    @Test func cursorRoundTripsAndRejectsGarbage() {
        let cursor = Grandfather.Cursor(createdAt: at(1), userId: "a:b")
        #expect(Grandfather.Cursor(cursor.text) == cursor)
        #expect(Grandfather.Cursor("nonsense") == nil)
        #expect(Grandfather.Cursor("12:") == nil)
    }

    @Test func differencesNameTheFields() {
        let a = SubscriptionState(subscriptionId: "s1", provider: .revenuecat, tier: .pro, phase: .active, lastEventAt: at(0))
        var b = a
        b.tier = .plus
        let extra = SubscriptionState(subscriptionId: "s2", provider: .revenuecat, lastEventAt: at(0))
        let diffs = EventAdmin.differences(stored: [b, extra], folded: [a])
        #expect(
            diffs == [
                EventAdmin.Difference(subscriptionId: "s1", fields: ["tier"]),
                EventAdmin.Difference(subscriptionId: "s2", fields: ["extra"]),
            ])
        #expect(EventAdmin.differences(stored: [a], folded: [a]).isEmpty)
    }

    @Test func adminErrorsCarryCodeAndReason() {
        let error = BillingError(.idempotencyMismatch, "m", data: ["grantId": 3]).rpcError
        #expect(error.code == 1002)
        #expect(error.data == ["grantId": 3, "reason": "idempotency_mismatch"])
    }
}
