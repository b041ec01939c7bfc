/// `GET /api/v1/billing/offerings?placement=P` (Bearer ID token): what the paywall of this
/// placement shows this user now (SPEC §14): whether the placement runs its ladder for him,
/// whether purchases are enabled, the offering at his stage with its products (tier,
/// cadence, intro offer, and whether he may still take an intro offer in its subscription
/// group), and the contract version. The stage, the trial history and the switch are read
/// in one transaction, so they are one consistent state.
struct OfferingsRoute: Sendable {
    let offerings: OfferingCatalog
    let catalog: ProductCatalog
    let tiers: TierResolver

    func handle(_ request: HTTPRequest, _ context: some UserRequestContext) throws -> HTTPResponse {
        let userId = try context.authenticatedUser(request)
        guard let placement = request.queryValue("placement"), !placement.isEmpty else {
            throw APIError.badRequest("the query parameter \"placement\" is required")
        }
        guard OfferingContract.isId(placement) else {
            throw APIError.badRequest("\"placement\" must be 1 to 64 characters among letters, digits and . _ : -")
        }
        let db = try context.requireDatabase()
        let now = context.clock.now()
        let published = OfferingCatalog.version(in: try offerings.versions(on: db), at: now)
        let contract = published.contract
        guard contract.placements[placement] != nil else {
            throw APIError(.notFound, code: "unknown_placement", message: "no placement \"\(placement)\" in offerings version \(published.version)")
        }
        let (decision, history, flags) = try db.transaction(retries: 3) { db in
            try ErasedUsers.holdLive(userId, on: db)  // 410 user_deleted (SPEC §19)
            var stage = 0
            if case .ladder(let ladder)? = contract.placements[placement]?.shows {
                stage = try OfferingLadder.storedStage(userId: userId, ladder: ladder, on: db)
            }
            return (
                OfferingLadder.decide(contract, placement: placement, storedStage: stage)!,
                try OfferingLadder.introHistory(userId: userId, on: db), try BillingFlags.load(on: db)
            )
        }
        let offering = contract.offerings[decision.offering]
        let products: [JSON] = (offering?.products ?? []).map { product in
            var entry = product.json.objectValue ?? [:]
            entry["tier"] = tiers.tier(entitlementIds: [], productId: product.productId).map { .string($0.rawValue) } ?? .null
            entry["cadence"] = catalog.cadence(of: product.productId).map { .string($0.rawValue) } ?? .null
            if entry["introOffer"] == nil { entry["introOffer"] = .null }
            entry["trialEligible"] = .bool(OfferingLadder.trialEligible(contract, productId: product.productId, introHistory: history))
            entry["subscriptionGroup"] = .string(contract.subscriptionGroup(of: product.productId))
            return .object(entry)
        }
        var offeringJSON: JSONObject = ["id": .string(decision.offering), "products": .array(products)]
        if let description = offering?.description { offeringJSON["description"] = .string(description) }
        let stages = decision.ladder.flatMap { contract.ladders[$0] }
        return .json(
            .ok,
            [
                "placement": .string(placement),
                "eligible": .bool(decision.eligible),
                "purchasesEnabled": .bool(flags.purchasesEnabled),
                "offeringVersion": .int(Int64(published.version)),
                "ladder": decision.ladder.map(JSON.string) ?? .null,
                "stage": decision.stage.map { .int(Int64($0)) } ?? .null,
                "stages": stages.map { .array($0.map(JSON.string)) } ?? .null,
                "offering": .object(offeringJSON),
            ])
    }
}
