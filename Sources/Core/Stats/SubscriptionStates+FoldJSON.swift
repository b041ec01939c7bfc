// MARK: - The stored fold (billing_subscription_folds.fold)

extension SubscriptionStates.Fold {
    /// The fold as stored; `init(json:)` reads it back (nil for anything else: that
    /// subscription is then derived again whole).
    var json: JSON {
        [
            "replacedAt": Self.number(replacedAt), "period": period.map(Self.encode) ?? .null, "cancelling": .bool(cancelling),
            "latestExpiry": Self.number(latestExpiry), "issueGrace": Self.number(issueGrace), "firstPaid": Self.number(firstPaid),
            "last": last.map(Self.encode) ?? .null, "open": open.map(Self.encode) ?? .null,
            "counts": Self.encode(counts),
        ]
    }

    init?(json: JSON) {
        guard case .object = json, let cancelling = json["cancelling"]?.boolValue else { return nil }
        self.init(replacedAt: json["replacedAt"]?.int64Value)
        self.cancelling = cancelling
        latestExpiry = json["latestExpiry"]?.int64Value
        issueGrace = json["issueGrace"]?.int64Value
        firstPaid = json["firstPaid"]?.int64Value
        if let p = json["period"], p != .null {
            guard let event = Self.event(p) else { return nil }
            period = event
        }
        if let l = json["last"], l != .null {
            guard let event = Self.event(l) else { return nil }
            last = event
        }
        if let o = json["open"], o != .null {
            guard let state = Self.state(o) else { return nil }
            open = state
        }
        // A fold stored before sql/026 has no classification: derived again whole.
        guard let c = json["counts"], let counts = Self.counts(c) else { return nil }
        self.counts = counts
    }

    private static func encode(_ c: SubscriptionStates.CountFold) -> JSON {
        [
            "seen": .bool(c.seen), "paidAt": number(c.paidAt), "lastPeriodTrial": .bool(c.lastPeriodTrial),
            "lastCancellation": number(c.lastCancellation), "lastLoss": number(c.lastLoss),
            "lastRefund": number(c.lastRefund), "lastRevoke": number(c.lastRevoke),
            "periods": .array(c.periods.sorted { $0.key < $1.key }.map { [.int($0.key), .int(Int64($0.value))] }),
            "forgottenUpTo": number(c.forgottenUpTo),
        ]
    }

    private static func counts(_ j: JSON) -> SubscriptionStates.CountFold? {
        guard let seen = j["seen"]?.boolValue, let lastPeriodTrial = j["lastPeriodTrial"]?.boolValue,
            case .array(let periods)? = j["periods"]
        else { return nil }
        var c = SubscriptionStates.CountFold()
        c.seen = seen
        c.paidAt = j["paidAt"]?.int64Value
        c.lastPeriodTrial = lastPeriodTrial
        c.lastCancellation = j["lastCancellation"]?.int64Value
        c.lastLoss = j["lastLoss"]?.int64Value
        c.lastRefund = j["lastRefund"]?.int64Value
        c.lastRevoke = j["lastRevoke"]?.int64Value
        c.forgottenUpTo = j["forgottenUpTo"]?.int64Value
        for p in periods {
            guard case .array(let pair) = p, pair.count == 2, let key = pair[0].int64Value, let bits = pair[1].int64Value
            else { return nil }
            c.periods[key] = Int(bits)
        }
        return c
    }

    private static func number(_ v: Int64?) -> JSON { v.map(JSON.int) ?? .null }
    private static func text(_ v: String?) -> JSON { v.map(JSON.string) ?? .null }

    private static func encode(_ e: SubscriptionStates.Event) -> JSON {
        [
            "id": .int(Int64(e.id)), "at": .int(e.at), "kind": .string(e.kind), "countedKind": .string(e.countedKind),
            "userId": text(e.userId),
            "productId": text(e.productId), "isTrial": .bool(e.isTrial), "familyShared": .bool(e.familyShared),
            "priceMilli": number(e.priceMilli), "currency": text(e.currency), "purchasedAt": number(e.purchasedAt),
            "expiresAt": number(e.expiresAt), "graceExpiresAt": number(e.graceExpiresAt),
            "willRenew": e.willRenew.map(JSON.bool) ?? .null, "userCreatedAt": number(e.userCreatedAt),
        ]
    }

    private static func event(_ j: JSON) -> SubscriptionStates.Event? {
        guard let id = j["id"]?.int64Value, id >= 0, let at = j["at"]?.int64Value, let kind = j["kind"]?.stringValue,
            let countedKind = j["countedKind"]?.stringValue, let isTrial = j["isTrial"]?.boolValue, let familyShared = j["familyShared"]?.boolValue
        else { return nil }
        return SubscriptionStates.Event(
            id: UInt64(id), at: at, kind: kind, countedKind: countedKind, userId: j["userId"]?.stringValue, productId: j["productId"]?.stringValue,
            isTrial: isTrial, familyShared: familyShared, priceMilli: j["priceMilli"]?.int64Value,
            currency: j["currency"]?.stringValue, purchasedAt: j["purchasedAt"]?.int64Value,
            expiresAt: j["expiresAt"]?.int64Value, graceExpiresAt: j["graceExpiresAt"]?.int64Value,
            willRenew: j["willRenew"]?.boolValue, userCreatedAt: j["userCreatedAt"]?.int64Value)
    }

    private static func encode(_ s: SubscriptionStates.State) -> JSON {
        [
            "eventId": .int(Int64(s.eventId)), "validFrom": .int(s.validFrom), "activeUntil": .int(s.activeUntil),
            "userId": text(s.userId), "productId": text(s.productId), "isTrial": .bool(s.isTrial),
            "familyShared": .bool(s.familyShared), "cancelling": .bool(s.cancelling), "priceMilli": number(s.priceMilli),
            "currency": text(s.currency), "paidAt": number(s.paidAt), "periodSeconds": number(s.periodSeconds),
        ]
    }

    private static func state(_ j: JSON) -> SubscriptionStates.State? {
        guard let id = j["eventId"]?.int64Value, id >= 0, let from = j["validFrom"]?.int64Value,
            let until = j["activeUntil"]?.int64Value, let isTrial = j["isTrial"]?.boolValue,
            let familyShared = j["familyShared"]?.boolValue, let cancelling = j["cancelling"]?.boolValue
        else { return nil }
        return SubscriptionStates.State(
            eventId: UInt64(id), validFrom: from, activeUntil: until, userId: j["userId"]?.stringValue,
            productId: j["productId"]?.stringValue, isTrial: isTrial, familyShared: familyShared, cancelling: cancelling,
            priceMilli: j["priceMilli"]?.int64Value, currency: j["currency"]?.stringValue, paidAt: j["paidAt"]?.int64Value,
            periodSeconds: j["periodSeconds"]?.int64Value, firstPaidAt: nil)
    }
}
