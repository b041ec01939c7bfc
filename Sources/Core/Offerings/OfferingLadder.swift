/// The rules of placements and the offer ladder (SPEC §14), pure, and the stage as stored
/// in `offering_ladder_stages` (no row: stage 0).
enum OfferingLadder {
    /// What a placement shows this user now.
    struct Decision: Sendable, Equatable {
        var placement: String
        /// The placement runs its ladder for this user.
        var eligible: Bool
        /// The ladder the placement names, if any (also when it is not eligible).
        var ladder: String?
        /// Index of the offering in the ladder, when the placement runs it; nil otherwise.
        var stage: Int?
        var offering: String
    }

    /// The decision for `placement` given the user's stored stage of its ladder (clamped to
    /// the ladder: a shortened ladder leaves him on its last offering). nil: no such placement.
    static func decide(_ contract: OfferingContract, placement id: String, storedStage: Int) -> Decision? {
        guard let placement = contract.placements[id] else { return nil }
        switch placement.shows {
        case .offering(let offering):
            return Decision(placement: id, eligible: false, ladder: nil, stage: nil, offering: offering)
        case .ladder(let ladder):
            let stages = contract.ladders[ladder] ?? []
            guard placement.eligible, !stages.isEmpty else {
                // Not ladder-eligible: the ladder's standard (first) offering, no stage.
                return Decision(placement: id, eligible: false, ladder: ladder, stage: nil, offering: stages.first ?? "")
            }
            let stage = min(max(storedStage, 0), stages.count - 1)
            return Decision(placement: id, eligible: true, ladder: ladder, stage: stage, offering: stages[stage])
        }
    }

    /// The ladder a dismissal on `placement` may advance, and from which stage: the dismissed
    /// offering's index in it. nil when the placement runs no ladder for the user, or the
    /// offering is not one of its stages, or it is the last one (capped).
    static func advance(_ contract: OfferingContract, placement id: String, dismissed offering: String)
        -> (ladder: String, from: Int)?
    {
        guard let placement = contract.placements[id], placement.eligible, case .ladder(let ladder) = placement.shows,
            let stages = contract.ladders[ladder], let index = stages.firstIndex(of: offering), index < stages.count - 1
        else {
            return nil
        }
        return (ladder, index)
    }

    /// The stage an offering shown on `placement` stands for (its index in the placement's
    /// ladder), for the funnel; nil when the placement runs no ladder or it is not a stage.
    static func stage(_ contract: OfferingContract, placement id: String, offering: String) -> Int? {
        guard let placement = contract.placements[id], case .ladder(let ladder) = placement.shows else { return nil }
        return contract.ladders[ladder]?.firstIndex(of: offering)
    }

    /// A product's intro offer is open to the user until he had any trial or intro offer in
    /// its subscription group, from either provider (`introHistory`: the products of his
    /// trial or intro periods).
    static func trialEligible(_ contract: OfferingContract, productId: String, introHistory: Set<String>) -> Bool {
        let group = contract.subscriptionGroup(of: productId)
        return !contract.products(inGroup: group).contains(where: introHistory.contains) && !introHistory.contains(productId)
    }

    // MARK: - Stored stage

    /// The stored stage of a ladder (0 when never advanced or reset).
    static func storedStage(userId: String, ladder: String, on db: DatabaseConnection) throws(DatabaseError) -> Int {
        try db.queryOne("SELECT stage FROM offering_ladder_stages WHERE user_id = \(userId) AND ladder = \(ladder)")?.int("stage") ?? 0
    }

    /// Moves the ladder from `from` to the next stage, only if it stands at `from`: of any
    /// number of concurrent dismissals of the same offering, one moves it. True when it moved.
    @discardableResult
    static func advance(
        userId: String, ladder: String, from: Int, now: Timestamp,
        on db: DatabaseConnection
    ) throws(DatabaseError) -> Bool {
        let result: ExecuteResult
        if from == 0 {
            // No row is stage 0. (Assignments run left to right: updated_at reads the old stage.)
            result = try db.execute(
                """
                INSERT INTO offering_ladder_stages (user_id, ladder, stage, updated_at) VALUES (\(userId), \(ladder), 1, \(now))
                ON DUPLICATE KEY UPDATE updated_at = IF(stage = 0, VALUES(updated_at), updated_at), stage = IF(stage = 0, 1, stage)
                """)
        } else {
            result = try db.execute(
                """
                UPDATE offering_ladder_stages SET stage = \(from + 1), updated_at = \(now)
                WHERE user_id = \(userId) AND ladder = \(ladder) AND stage = \(from)
                """)
        }
        return result.affectedRows > 0
    }

    /// A confirmed purchase at `purchasedAt` resets every ladder of the user whose stage last
    /// moved at or before it (a dismissal after the purchase, known before a late
    /// notification of it, stands). Returns the ladders reset.
    @discardableResult
    static func resetAfterPurchase(userId: String, purchasedAt: Timestamp, on db: DatabaseConnection) throws(DatabaseError) -> Int {
        try db.execute("DELETE FROM offering_ladder_stages WHERE user_id = \(userId) AND updated_at <= \(purchasedAt)").affectedRows
    }

    /// The products of the user's trial or intro periods, from either provider.
    static func introHistory(userId: String, on db: DatabaseConnection) throws(DatabaseError) -> Set<String> {
        var products: Set<String> = []
        for row in try db.query(
            """
            SELECT DISTINCT product_id FROM billing_events
            WHERE user_id = \(userId) AND product_id IS NOT NULL AND status = 'applied'
              AND (is_trial = 1 OR period_type IN ('trial', 'intro'))
            """)
        {
            products.insert(try row.string("product_id"))
        }
        return products
    }
}
