// MARK: - The stored fold (billing_subscription_folds.fold)

extension SubscriptionStates.Fold {
    /// The fold as stored; `init(json:)` reads it back (nil for anything else: that
    /// subscription is then derived again whole).
    var json: JSON {
        [
            "replacedAt": Self.number(replacedAt), "period": period.map(Self.encode) ?? .null, "cancelling": .bool(cancelling),
            "latestExpiry": Self.number(latestExpiry), "issueGrace": Self.number(issueGrace), "firstPaid": Self.number(firstPaid),
            "last": last.map(Self.encode) ?? .null, "open": open.map(Self.encode) ?? .null,
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
    }

    private static func number(_ v: Int64?) -> JSON { v.map(JSON.int) ?? .null }
    private static func text(_ v: String?) -> JSON { v.map(JSON.string) ?? .null }

    private static func encode(_ e: SubscriptionStates.Event) -> JSON {
        [
            "id": .int(Int64(e.id)), "at": .int(e.at), "kind": .string(e.kind), "userId": text(e.userId),
            "productId": text(e.productId), "isTrial": .bool(e.isTrial), "familyShared": .bool(e.familyShared),
            "priceMilli": number(e.priceMilli), "currency": text(e.currency), "purchasedAt": number(e.purchasedAt),
            "expiresAt": number(e.expiresAt), "graceExpiresAt": number(e.graceExpiresAt),
            "willRenew": e.willRenew.map(JSON.bool) ?? .null,
        ]
    }

    private static func event(_ j: JSON) -> SubscriptionStates.Event? {
        guard let id = j["id"]?.int64Value, id >= 0, let at = j["at"]?.int64Value, let kind = j["kind"]?.stringValue,
            let isTrial = j["isTrial"]?.boolValue, let familyShared = j["familyShared"]?.boolValue
        else { return nil }
        return SubscriptionStates.Event(
            id: UInt64(id), at: at, kind: kind, userId: j["userId"]?.stringValue, productId: j["productId"]?.stringValue,
            isTrial: isTrial, familyShared: familyShared, priceMilli: j["priceMilli"]?.int64Value,
            currency: j["currency"]?.stringValue, purchasedAt: j["purchasedAt"]?.int64Value,
            expiresAt: j["expiresAt"]?.int64Value, graceExpiresAt: j["graceExpiresAt"]?.int64Value,
            willRenew: j["willRenew"]?.boolValue)
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
