/// Which plan applies to a user with several sources of access in force (SPEC §6–7), as a
/// pure function of those sources, the published plans and the clock.
///
/// Every source in force counts: the store's paid period, a store trial, operator grants,
/// grandfather campaigns. Capabilities are those of the tiers in force (the highest tier's,
/// and nothing any other source gives is taken away); each meter's limit is the most
/// generous among the sources, with that source's window. So a trial never lowers what a
/// paid period, a grant or a campaign already gives, and two trials or a grant over a paid
/// period never add up (no double credit: one limit per meter, the largest).
enum QuotaResolution {
    /// One source of access in force, as the plan contract sees it.
    struct Source: Sendable, Equatable {
        var tier: Tier
        /// The store trial's period when this source is a store trial (the contract's
        /// `trial` tier applies to it, with this period as its `"trial"` window).
        var trialStartsAt: Timestamp?
        var trialEndsAt: Timestamp?
        var isTrial: Bool

        init(tier: Tier, isTrial: Bool = false, trialStartsAt: Timestamp? = nil, trialEndsAt: Timestamp? = nil) {
            self.tier = tier
            self.isTrial = isTrial
            self.trialStartsAt = trialStartsAt
            self.trialEndsAt = trialEndsAt
        }

        /// The contract tier whose meters this source gives.
        var planTier: PlanContract.PlanTier {
            if isTrial { return .trial }
            switch tier {
            case .free: return .free
            case .plus: return .plus
            case .pro: return .pro
            }
        }

        var trialWindow: (start: Timestamp, end: Timestamp)? {
            guard isTrial, let start = trialStartsAt, let end = trialEndsAt, end > start else { return nil }
            return (start, end)
        }
    }

    /// Order among plan tiers when two sources give the same limit (the window and the
    /// ledger's `plan_tier` then come from the higher one): pro, plus, trial, free.
    static func rank(_ tier: PlanContract.PlanTier) -> Int {
        switch tier {
        case .pro: return 3
        case .plus: return 2
        case .trial: return 1
        case .free: return 0
        }
    }

    /// The plan for `sources` at `now`; no source in force is the free tier.
    /// - Parameter anchor: the user's sign-up, where windows of N days start.
    static func plan(sources: [Source], plans: [PublishedPlan], anchor: Timestamp, now: Timestamp) -> QuotaPlan {
        resolve(sources: sources, plans: plans, anchor: anchor, now: now).plan
    }

    /// `plan` at `now`, or `last` again (`reused`) when it is provably the plan `plan` would
    /// resolve at `now` (`Resolved.holds`): an access request reuses its user's resolution
    /// until one of his windows rolls over or another plan version takes effect.
    static func plan(
        sources: [Source], plans: [PublishedPlan], anchor: Timestamp, now: Timestamp,
        reusing last: Resolved?
    ) -> (resolved: Resolved, reused: Bool) {
        if let last, last.holds(sources: sources, plans: plans, anchor: anchor, now: now) { return (last, true) }
        return (resolve(sources: sources, plans: plans, anchor: anchor, now: now), false)
    }

    /// A resolved plan, what it was resolved from, and the instants over which `plan` gives
    /// it for those inputs: from its resolution up to (not including) `changesAt`, the first
    /// later instant at which a window of any source's meter rolls over or any plan version
    /// takes effect. Between those instants nothing `plan` reads of the clock can change: the
    /// version in force, every window, and the version at each window's start.
    struct Resolved: Sendable {
        let plan: QuotaPlan
        let sources: [Source]
        let anchor: Timestamp
        /// The published versions resolved against (rows are immutable: their numbers name them).
        let planVersions: [Int]
        let resolvedAt: Timestamp
        /// nil: no later instant changes it.
        let changesAt: Timestamp?

        /// Whether `plan(sources:plans:anchor:now:)` gives `plan`.
        func holds(sources: [Source], plans: [PublishedPlan], anchor: Timestamp, now: Timestamp) -> Bool {
            guard now >= resolvedAt, changesAt.map({ now < $0 }) ?? true else { return false }
            return anchor == self.anchor && sources == self.sources && planVersions.elementsEqual(plans.lazy.map(\.version))
        }
    }

    private static func resolve(sources: [Source], plans: [PublishedPlan], anchor: Timestamp, now: Timestamp) -> Resolved {
        let current = PlanCatalog.plan(in: plans, at: now)
        // Every version's effective instant after now may change which one is in force.
        var changesAt = plans.lazy.map(\.publishedAt).filter { $0 > now }.min()
        var inForce = sources.filter { $0.tier > .free }
        if inForce.isEmpty { inForce = [Source(tier: .free)] }
        // Highest first: ties in limit resolve to the first candidate met.
        inForce.sort { a, b in
            rank(a.planTier) != rank(b.planTier) ? rank(a.planTier) > rank(b.planTier) : a.tier > b.tier
        }

        // Capabilities: the highest tier in force (a trial counts at its own tier) first, then
        // whatever another source in force adds.
        var capabilities: [String] = []
        // A plan names a dozen capabilities: a linear search of the list beats hashing each
        // name into a set, and this runs on every access request.
        let capabilityTiers = inForce.sorted { $0.tier > $1.tier }.flatMap { source -> [PlanContract.PlanTier] in
            source.isTrial ? [Source(tier: source.tier).planTier, .trial] : [source.planTier]
        }
        for tier in capabilityTiers {
            for name in current.contract.tiers[tier]?.capabilities ?? [] where !capabilities.contains(name) {
                capabilities.append(name)
            }
        }

        // Meters: per name, the most generous definition among the sources (a meter a
        // source's tier lacks gives 0 there), each with its own window and version.
        var best = [String: QuotaPlan.Meter](minimumCapacity: 16)
        for source in inForce {
            for candidate in meters(
                planTier: source.planTier, plans: plans, anchor: anchor, now: now, trial: source.trialWindow,
                changesAt: &changesAt)
            {
                if let incumbent = best[candidate.name], !isMoreGenerous(candidate.limit, than: incumbent.limit) { continue }
                best[candidate.name] = candidate
            }
        }
        let planTier = inForce[0].planTier
        let plan = QuotaPlan(
            planVersion: current.version, planTier: planTier, capabilities: capabilities,
            meters: best.keys.sorted().map { best[$0]! })
        return Resolved(
            plan: plan, sources: sources, anchor: anchor, planVersions: plans.map(\.version), resolvedAt: now,
            changesAt: changesAt)
    }

    /// nil is unlimited.
    static func isMoreGenerous(_ a: Int64?, than b: Int64?) -> Bool {
        switch (a, b) {
        case (nil, nil): return false
        case (nil, _): return true
        case (_, nil): return false
        case let (a?, b?): return a > b
        }
    }

    /// The meter definitions of one plan tier at `now`, each with its window and the version
    /// in effect at that window's start (a running window keeps the contract it started under).
    /// Lowers `changesAt` to the end of every window it looks at that ends after `now`: there
    /// the window rolls over, and the next one may start under another version.
    private static func meters(
        planTier: PlanContract.PlanTier, plans: [PublishedPlan], anchor: Timestamp, now: Timestamp,
        trial: (start: Timestamp, end: Timestamp)?, changesAt: inout Timestamp?
    ) -> [QuotaPlan.Meter] {
        func rollsOver(_ window: QuotaWindow) {
            if window.end > now, changesAt.map({ window.end < $0 }) ?? true { changesAt = window.end }
        }
        let current = PlanCatalog.plan(in: plans, at: now)
        var result: [QuotaPlan.Meter] = []
        let tierMeters = current.contract.tiers[planTier]?.meters ?? [:]
        for name in tierMeters.keys.sorted() {
            guard var meter = tierMeters[name] else { continue }
            var version = current.version
            var window = QuotaWindow.current(meter.window, anchor: anchor, now: now, trial: trial)
            rollsOver(window)
            let atStart = PlanCatalog.plan(in: plans, at: window.start)
            if atStart.version != current.version, let older = atStart.contract.tiers[planTier]?.meters[name] {
                meter = older
                version = atStart.version
                window = QuotaWindow.current(meter.window, anchor: anchor, now: now, trial: trial)
                rollsOver(window)
            }
            result.append(
                QuotaPlan.Meter(
                    name: name, limit: meter.limit, window: window, placement: meter.placement,
                    version: version, planTier: planTier))
        }
        return result
    }
}
