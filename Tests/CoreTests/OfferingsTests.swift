import Foundation
import Testing

@testable import Core

/// The offerings contract and the ladder rules (SPEC §14), over every combination: each
/// placement × stored stage × dismissed offering, every dismissal sequence, and each product
/// × intro history. The database side (conditional step, reset, history per provider) is
/// proven end to end in Tests/e2e/test_offerings.py.
@Suite struct OfferingsTests {
    /// Version 1 as migration 012 ships it.
    static let v1: OfferingContract = {
        let sql = (try? String(contentsOfFile: QuotaRuleTests.repo + "/sql/012_offerings.sql", encoding: .utf8)) ?? ""
        let start = sql.range(of: "VALUES (1, '")!.upperBound
        let end = sql.range(of: "', '2000-01-01", range: start..<sql.endIndex)!.lowerBound
        return try! OfferingContract(json: try! JSON.parse(String(sql[start..<end])))
    }()

    static let ladder = ["default", "save50", "save65"]

    /// v1 plus a ladder placement that is not eligible and a product outside every group.
    static let extended: OfferingContract = {
        var json = v1.json.objectValue!
        var placements = json["placements"]!.objectValue!
        placements["not_eligible"] = ["ladder": "acquisition", "eligible": false]
        json["placements"] = .object(placements)
        var offerings = json["offerings"]!.objectValue!
        var standard = offerings["default"]!.objectValue!
        standard["products"] = .array(standard["products"]!.arrayValue! + [["productId": "loose.product"]])
        offerings["default"] = .object(standard)
        json["offerings"] = .object(offerings)
        return try! OfferingContract(json: .object(json))
    }()

    @Test func version1FollowsTheSeedsAndRoundTrips() throws {
        let c = Self.v1
        #expect(Set(c.offerings.keys) == ["default", "save50", "save65"])
        #expect(c.ladders == ["acquisition": Self.ladder])
        #expect(c.placements["settings"] == .init(shows: .offering("default"), eligible: false))
        let acquisition = c.placements.filter { $0.value.shows == .ladder("acquisition") }
        #expect(acquisition.count >= 5)
        #expect(acquisition.values.allSatisfy { $0.eligible })
        #expect(c.offerings["default"]!.products.allSatisfy { $0.introOffer?.kind == .freeTrial })
        #expect(c.offerings["save50"]!.products.allSatisfy { $0.promotionalOffer == "save50" && $0.introOffer == nil })
        #expect(c.offerings["default"]!.products.count == 6)
        #expect(try OfferingContract(json: c.json) == c)
    }

    @Test func refusesInvalidContractsNamingEveryProblem() {
        func with(_ edit: (inout JSONObject) -> Void) -> JSON {
            var json = Self.v1.json.objectValue!
            edit(&json)
            return .object(json)
        }
        func set(_ json: inout JSONObject, _ section: String, _ key: String, _ value: JSON) {
            var object = json[section]?.objectValue ?? [:]
            object[key] = value
            json[section] = .object(object)
        }
        let cases: [(JSON, String)] = [
            ([:], "offerings: required"),
            (with { $0["bogus"] = 1 }, "bogus: unknown key"),
            (with { set(&$0, "placements", "p", ["ladder": "nope"]) }, "placements.p.ladder: unknown ladder"),
            (with { set(&$0, "placements", "p", ["offering": "nope"]) }, "placements.p.offering: unknown offering"),
            (with { set(&$0, "placements", "p", ["offering": "default", "eligible": true]) }, "placements.p.eligible"),
            (with { set(&$0, "placements", "p", ["offering": "default", "ladder": "acquisition"]) }, "exactly one of"),
            (with { set(&$0, "placements", "p", ["ladder": "acquisition", "eligible": "yes"]) }, "placements.p.eligible: expected a boolean"),
            (with { set(&$0, "placements", "bad id", ["offering": "default"]) }, "placements.bad id: invalid id"),
            (with { set(&$0, "ladders", "l", ["default", "default"]) }, "ladders.l: an offering appears twice"),
            (with { set(&$0, "ladders", "l", ["missing"]) }, "ladders.l: unknown offering"),
            (with { set(&$0, "ladders", "l", []) }, "ladders.l: expected a non-empty array"),
            (with { set(&$0, "offerings", "o", ["products": []]) }, "offerings.o.products: required non-empty"),
            (with { set(&$0, "offerings", "o", ["products": [["productId": "a"], ["productId": "a"]]]) }, "listed twice"),
            (
                with { set(&$0, "offerings", "o", ["products": [["productId": "a", "introOffer": ["type": "freeTrial", "period": "1W"]]]]) },
                "offerings.o.products[0].introOffer"
            ),
            (
                with { set(&$0, "offerings", "o", ["products": [["productId": "a", "introOffer": ["type": "gift", "period": "P1W"]]]]) },
                "offerings.o.products[0].introOffer"
            ),
            (with { set(&$0, "offerings", "o", ["products": [["sku": "a"]]]) }, "offerings.o.products[0].sku: unknown key"),
            (with { set(&$0, "subscriptionGroups", "g", ["app.lissin.audio.plus.weekly"]) }, "is in more than one group"),
        ]
        for (json, expected) in cases {
            #expect(throws: OfferingContractError.self, "\(expected)") { try OfferingContract(json: json) }
            do {
                _ = try OfferingContract(json: json)
            } catch {
                #expect(error.problems.contains { $0.contains(expected) }, "\(expected) not in \(error.problems)")
            }
        }
    }

    @Test func everyPlacementAtEveryStoredStage() {
        let c = Self.extended
        for (id, placement) in c.placements {
            for stored in -1...5 {
                let d = OfferingLadder.decide(c, placement: id, storedStage: stored)!
                switch (placement.shows, placement.eligible) {
                case (.offering(let fixed), _):
                    #expect(d == .init(placement: id, eligible: false, ladder: nil, stage: nil, offering: fixed))
                case (.ladder(let ladder), false):
                    #expect(d == .init(placement: id, eligible: false, ladder: ladder, stage: nil, offering: Self.ladder[0]))
                case (.ladder(let ladder), true):
                    let expected = min(max(stored, 0), 2)
                    #expect(
                        d == .init(placement: id, eligible: true, ladder: ladder, stage: expected, offering: Self.ladder[expected]),
                        "\(id) stored \(stored)")
                }
            }
        }
        #expect(OfferingLadder.decide(c, placement: "unknown", storedStage: 0) == nil)
    }

    @Test func aShortenedLadderLeavesTheUserOnItsLastOffering() throws {
        var json = Self.v1.json.objectValue!
        json["ladders"] = ["acquisition": ["default", "save50"]]
        let c = try OfferingContract(json: .object(json))
        #expect(OfferingLadder.decide(c, placement: "onboarding", storedStage: 2)?.offering == "save50")
        #expect(OfferingLadder.advance(c, placement: "onboarding", dismissed: "save65") == nil)
    }

    /// The stored step (`stage = from + 1 WHERE stage = from`) applied to every sequence of up
    /// to four dismissals on every placement ends where the rule says: a dismissal moves the
    /// ladder one stage iff the placement runs it, the dismissed offering is the one at the
    /// current stage and that stage is not the last.
    @Test func everyDismissalSequenceOnEveryPlacement() {
        let c = Self.extended
        let shown = Self.ladder + ["other"]
        var sequences: [[String]] = [[]]
        for _ in 0..<4 { sequences += sequences.filter { $0.count == sequences.last!.count }.flatMap { s in shown.map { s + [$0] } } }
        for (id, placement) in c.placements {
            for sequence in sequences {
                var stored = 0
                var reference = 0
                for dismissed in sequence {
                    if let step = OfferingLadder.advance(c, placement: id, dismissed: dismissed), step.from == stored {
                        stored = step.from + 1
                    }
                    let runs = placement.eligible && placement.shows == .ladder("acquisition")
                    if runs, reference < Self.ladder.count - 1, dismissed == Self.ladder[reference] { reference += 1 }
                }
                #expect(stored == reference, "\(id) \(sequence)")
                #expect(stored <= 2)
            }
        }
    }

    @Test func theFunnelStageOfAnOfferingOnAPlacement() {
        let c = Self.extended
        for (id, placement) in c.placements {
            for (index, offering) in Self.ladder.enumerated() {
                let expected: Int? = placement.shows == .ladder("acquisition") ? index : nil
                #expect(OfferingLadder.stage(c, placement: id, offering: offering) == expected, "\(id) \(offering)")
            }
            #expect(OfferingLadder.stage(c, placement: id, offering: "other") == nil)
        }
    }

    /// Each product × each intro history (none; a trial or intro period of each product, as
    /// either provider records it: both land as the product of a trial/intro period).
    @Test func trialEligibilityPerProductAndHistory() {
        let c = Self.extended
        let products = c.offerings.values.flatMap { $0.products.map(\.productId) }
        let group = Set(c.subscriptionGroups["lissin"]!)
        let histories: [Set<String>] = [[]] + (products + ["unrelated.product"]).map { [$0] }
        for product in Set(products) {
            for history in histories {
                let spent: Bool
                if group.contains(product) { spent = !history.isDisjoint(with: group) } else { spent = history.contains(product) }
                #expect(OfferingLadder.trialEligible(c, productId: product, introHistory: history) == !spent, "\(product) after \(history)")
            }
        }
        #expect(c.subscriptionGroup(of: "loose.product") == "loose.product")
        #expect(c.subscriptionGroup(of: "app.lissin.audio.pro.yearly") == "lissin")
    }
}
