/// What `GET /api/v1/billing/access` answers (SPEC §6): the user's effective access at one
/// instant, from one consistent read. Expiry is judged here, at read time.
///
/// Sources: the store projection, operator grants and grandfather campaigns (overlays).
/// `tier` is always the highest active source, so an overlay never demotes a payer, and when
/// it ends the store tier shows again (nothing was replaced).
struct AccessSnapshot: Sendable, Equatable {
    var userId: String
    var revision: UInt64
    var serverTime: Timestamp
    /// Every source of access that is active now, highest tier first.
    var sources: [AccessSource]
    /// The subscription deciding the store tier (or explaining its absence).
    var store: SubscriptionState?
    /// Every store subscription granting access now, the deciding one first: quotas count
    /// them all (a paid period beside a trial of another product, SPEC §6).
    var storeInForce: [SubscriptionState]
    var storeCadence: Cadence?
    /// The user's sign-up: quota windows are anchored there.
    var userCreatedAt: Timestamp?
    /// Plan version, capabilities, balances and enforcement (`AccessSnapshot.loadWithQuota`).
    var quota: QuotaStatus?
    /// The user's access row exists but was never folded: his creation committed and the
    /// claim of his unmatched events that follows it did not (the process died, or the
    /// database failed, in between). Whoever reads such a snapshot runs the claim again.
    var unclaimed = false

    struct AccessSource: Sendable, Equatable {
        var tier: Tier
        /// `store`, `grant` or `campaign`.
        var kind: String
        var expiresAt: Timestamp?
        var campaign: String?

        init(tier: Tier, kind: String, expiresAt: Timestamp?, campaign: String? = nil) {
            self.tier = tier
            self.kind = kind
            self.expiresAt = expiresAt
            self.campaign = campaign
        }
    }

    /// Resolves `projection` at `now`. `cadence` maps a product id to its cadence.
    /// `overlays` are the active grant and campaign sources at `now`.
    init(
        userId: String, revision: UInt64, projection: StoreProjection, now: Timestamp,
        overlays: [AccessSource] = [], cadence: (String) -> Cadence? = { _ in nil }
    ) {
        self.userId = userId
        self.revision = revision
        self.serverTime = now
        self.store = projection.primary(at: now)
        let primaryId = store?.subscriptionId
        self.storeInForce = projection.subscriptions.filter { $0.grantsAccess(at: now) }
            .sorted { a, _ in a.subscriptionId == primaryId }
        self.storeCadence = store?.productId.flatMap(cadence)
        var sources: [AccessSource] = []
        if let store, store.grantsAccess(at: now), let tier = store.tier {
            sources.append(
                AccessSource(
                    tier: tier, kind: "store", expiresAt: store.phase == .grace ? (store.graceExpiresAt ?? store.expiresAt) : store.expiresAt))
        }
        self.sources = Self.ordered(sources + overlays)
    }

    /// Highest tier first; among equals the store first (a payer's own subscription is the
    /// source that explains his access), then grants, then campaigns, each by expiry
    /// (permanent last) so the order is deterministic.
    static func ordered(_ sources: [AccessSource]) -> [AccessSource] {
        func kindRank(_ kind: String) -> Int { kind == "store" ? 0 : kind == "grant" ? 1 : 2 }
        return sources.sorted { a, b in
            if a.tier != b.tier { return a.tier > b.tier }
            if kindRank(a.kind) != kindRank(b.kind) { return kindRank(a.kind) < kindRank(b.kind) }
            let ea = a.expiresAt?.millisecondsSinceEpoch ?? .max
            let eb = b.expiresAt?.millisecondsSinceEpoch ?? .max
            if ea != eb { return ea < eb }
            return (a.campaign ?? "") < (b.campaign ?? "")
        }
    }

    /// The effective tier: the highest active source (a grant never demotes a payer).
    var tier: Tier { sources.map(\.tier).max() ?? .free }

    /// The source deciding `tier`: the first among equals in `sources` order (store first).
    var source: String { sources.first { $0.tier == tier }?.kind ?? "none" }

    /// The store phase when the store decides or nothing does; `active` for an operator source.
    var phase: AccessPhase {
        if let store, source == "store" || source == "none" { return store.phase(at: serverTime) }
        return source == "none" ? .none : .active
    }

    /// What the document says that is judged at `serverTime`; everything else it says is
    /// the stored state this snapshot holds. `json` takes every time-dependent value from
    /// here, so two snapshots equal but for `serverTime` and with equal judgments answer the
    /// same document but for `serverTime` (`RenderedSnapshot` relies on it).
    struct Judgments: Equatable {
        var phase: AccessPhase
        var storePhase: AccessPhase?
        var storeGrantsAccess: Bool
        var trialInForce: Bool
    }

    var judgments: Judgments {
        Judgments(
            phase: phase, storePhase: store?.phase(at: serverTime), storeGrantsAccess: store?.grantsAccess(at: serverTime) ?? false,
            trialInForce: store?.isTrialInForce(at: serverTime) ?? false)
    }

    /// The document `GET /billing/access` answers; `serverTime` is its last member.
    var json: JSON {
        let judged = judgments
        var object: JSONObject = [
            "userId": .string(userId),
            "tier": .string(tier.rawValue),
            "phase": .string(judged.phase.rawValue),
            "source": .string(source),
            "sources": .array(
                sources.map { s in
                    [
                        "tier": .string(s.tier.rawValue), "kind": .string(s.kind), "expiresAt": JSON(s.expiresAt?.iso8601),
                        "campaign": JSON(s.campaign),
                    ]
                }),
        ]
        if let store {
            object["store"] = [
                "productId": JSON(store.productId),
                "cadence": JSON(storeCadence?.rawValue),
                "platform": JSON(store.platform),
                "environment": .string(store.environment.rawValue),
                "expiresAt": JSON(store.expiresAt?.iso8601),
                "willRenew": .bool(store.willRenew && judged.storeGrantsAccess),
            ]
        } else {
            object["store"] = .null
        }
        object["trial"] =
            judged.trialInForce ? ["startsAt": JSON(store?.trialStartsAt?.iso8601), "endsAt": JSON(store?.trialEndsAt?.iso8601)] : .null
        object["graceExpiresAt"] = judged.storePhase == .grace ? JSON(store?.graceExpiresAt?.iso8601) : .null
        if let pending = store?.pendingChange, judged.storeGrantsAccess {
            object["pendingChange"] = [
                "productId": .string(pending.productId), "tier": JSON(pending.tier?.rawValue),
                "effectiveAt": JSON(pending.effectiveAt?.iso8601),
            ]
        } else {
            object["pendingChange"] = .null
        }
        if let quota {
            object["planVersion"] = .int(Int64(quota.planVersion))
            object["capabilities"] = .array(quota.capabilities.map(JSON.string))
            object["balances"] = .object(JSONObject(quota.balances.map { ($0.meter, $0.json) }))
            object["enforcement"] = .string(quota.enforcement.rawValue)
        }
        object["revision"] = .int(Int64(revision))
        object["serverTime"] = .string(serverTime.iso8601)
        return .object(object)
    }
}
