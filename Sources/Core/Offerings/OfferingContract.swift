/// One immutable, numbered offerings contract (`offering_versions`, SPEC §14): what the
/// paywall offers and where.
///
/// ```json
/// {"description": "...",
///  "subscriptionGroups": {"main": ["app.plus.monthly", "app.pro.monthly"]},
///  "offerings": {"default": {"products": [{"productId": "app.plus.monthly",
///                                          "introOffer": {"type": "freeTrial", "period": "P1W"}}]},
///                "save50": {"products": [{"productId": "app.plus.monthly", "promotionalOffer": "save50"}]}},
///  "ladders": {"acquisition": ["default", "save50"]},
///  "placements": {"onboarding": {"ladder": "acquisition", "eligible": true},
///                 "settings": {"offering": "default", "eligible": false}}}
/// ```
/// A placement runs a ladder (the stage decides the offering: only when `eligible`, else it
/// shows the ladder's first offering) or shows a fixed offering (never eligible). A product
/// outside every subscription group is a group of its own.
struct OfferingContract: Sendable, Equatable {
    struct IntroOffer: Sendable, Equatable {
        enum Kind: String, Sendable, CaseIterable {
            case freeTrial, payAsYouGo, payUpFront
        }

        var kind: Kind
        /// ISO-8601 duration of the offer: P3D, P1W, P1M, P1Y, ...
        var period: String
    }

    struct Product: Sendable, Equatable {
        var productId: String
        var introOffer: IntroOffer?
        /// App Store promotional offer id the app redeems with this product.
        var promotionalOffer: String?
    }

    struct Offering: Sendable, Equatable {
        var description: String?
        var products: [Product]
    }

    enum Shows: Sendable, Equatable {
        case ladder(String)
        case offering(String)
    }

    struct Placement: Sendable, Equatable {
        var shows: Shows
        /// Whether the placement may run its ladder (SPEC §14: "only if the backend
        /// explicitly marks the placement eligible").
        var eligible: Bool
    }

    var description: String?
    var offerings: [String: Offering]
    var ladders: [String: [String]]
    var placements: [String: Placement]
    var subscriptionGroups: [String: [String]]

    /// The subscription group of a product: the group listing it, else the product itself.
    func subscriptionGroup(of productId: String) -> String {
        subscriptionGroups.first { $0.value.contains(productId) }?.key ?? productId
    }

    /// Every product of a group (a product outside every group: itself).
    func products(inGroup group: String) -> [String] {
        subscriptionGroups[group] ?? [group]
    }

    /// Validates `json` fully; every problem is reported with its path.
    init(json: JSON) throws(OfferingContractError) {
        var problems: [String] = []
        guard let root = json.objectValue else { throw OfferingContractError(problems: ["the contract must be an object"]) }
        for key in root.keys where !["description", "offerings", "ladders", "placements", "subscriptionGroups"].contains(key) {
            problems.append("\(key): unknown key")
        }
        if let d = root["description"], d.stringValue == nil { problems.append("description: expected a string") }

        var offerings: [String: Offering] = [:]
        if let object = root["offerings"]?.objectValue, !object.isEmpty {
            for (id, value) in object {
                let path = "offerings.\(id)"
                guard Self.isId(id) else {
                    problems.append("\(path): invalid id (1 to 64 of letters, digits, . _ : -)")
                    continue
                }
                guard let entry = value.objectValue else {
                    problems.append("\(path): expected an object")
                    continue
                }
                for key in entry.keys where key != "products" && key != "description" { problems.append("\(path).\(key): unknown key") }
                if let d = entry["description"], d.stringValue == nil { problems.append("\(path).description: expected a string") }
                guard let list = entry["products"]?.arrayValue, !list.isEmpty else {
                    problems.append("\(path).products: required non-empty array")
                    continue
                }
                var products: [Product] = []
                for (index, item) in list.enumerated() {
                    if let product = Self.product(item, path: "\(path).products[\(index)]", problems: &problems) { products.append(product) }
                }
                if Set(products.map(\.productId)).count != products.count { problems.append("\(path).products: a product is listed twice") }
                offerings[id] = Offering(description: entry["description"]?.stringValue, products: products)
            }
        } else {
            problems.append("offerings: required non-empty object")
        }

        var ladders: [String: [String]] = [:]
        if let object = root["ladders"]?.objectValue {
            for (id, value) in object {
                let path = "ladders.\(id)"
                guard Self.isId(id) else {
                    problems.append("\(path): invalid id")
                    continue
                }
                guard let stages = value.arrayValue?.compactMap(\.stringValue), stages.count == value.arrayValue?.count,
                    !stages.isEmpty
                else {
                    problems.append("\(path): expected a non-empty array of offering ids")
                    continue
                }
                for stage in stages where offerings[stage] == nil && root["offerings"]?.objectValue?[stage] == nil {
                    problems.append("\(path): unknown offering \"\(stage)\"")
                }
                if Set(stages).count != stages.count { problems.append("\(path): an offering appears twice") }
                ladders[id] = stages
            }
        } else if root["ladders"] != nil {
            problems.append("ladders: expected an object")
        }

        var placements: [String: Placement] = [:]
        if let object = root["placements"]?.objectValue, !object.isEmpty {
            for (id, value) in object {
                let path = "placements.\(id)"
                guard Self.isId(id) else {
                    problems.append("\(path): invalid id")
                    continue
                }
                guard let entry = value.objectValue else {
                    problems.append("\(path): expected an object")
                    continue
                }
                for key in entry.keys where !["ladder", "offering", "eligible"].contains(key) { problems.append("\(path).\(key): unknown key") }
                var eligible = false
                if let e = entry["eligible"] {
                    guard case .bool(let flag) = e else {
                        problems.append("\(path).eligible: expected a boolean")
                        continue
                    }
                    eligible = flag
                }
                switch (entry["ladder"]?.stringValue, entry["offering"]?.stringValue) {
                case (let ladder?, nil) where entry["offering"] == nil:
                    if ladders[ladder] == nil { problems.append("\(path).ladder: unknown ladder \"\(ladder)\"") }
                    placements[id] = Placement(shows: .ladder(ladder), eligible: eligible)
                case (nil, let offering?) where entry["ladder"] == nil:
                    if offerings[offering] == nil && root["offerings"]?.objectValue?[offering] == nil {
                        problems.append("\(path).offering: unknown offering \"\(offering)\"")
                    }
                    if eligible { problems.append("\(path).eligible: a fixed offering runs no ladder") }
                    placements[id] = Placement(shows: .offering(offering), eligible: false)
                default:
                    problems.append("\(path): expected exactly one of \"ladder\" or \"offering\" (a string)")
                }
            }
        } else {
            problems.append("placements: required non-empty object")
        }

        var groups: [String: [String]] = [:]
        if let object = root["subscriptionGroups"]?.objectValue {
            var seen: Set<String> = []
            for (id, value) in object {
                let path = "subscriptionGroups.\(id)"
                guard Self.isId(id) else {
                    problems.append("\(path): invalid id")
                    continue
                }
                guard let list = value.arrayValue?.compactMap(\.stringValue), list.count == value.arrayValue?.count, !list.isEmpty else {
                    problems.append("\(path): expected a non-empty array of product ids")
                    continue
                }
                for product in list where !seen.insert(product).inserted {
                    problems.append("\(path): \(product) is in more than one group")
                }
                groups[id] = list
            }
        } else if root["subscriptionGroups"] != nil {
            problems.append("subscriptionGroups: expected an object")
        }

        guard problems.isEmpty else { throw OfferingContractError(problems: problems.sorted()) }
        self.description = root["description"]?.stringValue
        self.offerings = offerings
        self.ladders = ladders
        self.placements = placements
        self.subscriptionGroups = groups
    }

    private static func product(_ item: JSON, path: String, problems: inout [String]) -> Product? {
        guard let entry = item.objectValue else {
            problems.append("\(path): expected an object")
            return nil
        }
        for key in entry.keys where !["productId", "introOffer", "promotionalOffer"].contains(key) {
            problems.append("\(path).\(key): unknown key")
        }
        guard let productId = entry["productId"]?.stringValue, isProductId(productId) else {
            problems.append("\(path).productId: required product id string")
            return nil
        }
        var intro: IntroOffer?
        if let value = entry["introOffer"], !value.isNull {
            guard let kind = value["type"]?.stringValue.flatMap(IntroOffer.Kind.init(rawValue:)),
                let period = value["period"]?.stringValue, isPeriod(period),
                value.objectValue?.keys.allSatisfy({ $0 == "type" || $0 == "period" }) == true
            else {
                problems.append("\(path).introOffer: expected {\"type\": freeTrial|payAsYouGo|payUpFront, \"period\": ISO-8601 like P1W}")
                return nil
            }
            intro = IntroOffer(kind: kind, period: period)
        }
        var promotional: String?
        if let value = entry["promotionalOffer"], !value.isNull {
            guard let text = value.stringValue, isId(text) else {
                problems.append("\(path).promotionalOffer: expected an offer id string")
                return nil
            }
            promotional = text
        }
        return Product(productId: productId, introOffer: intro, promotionalOffer: promotional)
    }

    /// Contract ids: what a paywall event accepts as a placement or offering, 1 to 64 characters.
    static func isId(_ text: String) -> Bool { ClientToken.isValid(text, maxLength: 64) }

    private static func isProductId(_ text: String) -> Bool { ClientToken.isValid(text, maxLength: 191) }

    /// P<n>D, P<n>W, P<n>M or P<n>Y with n in 1...999.
    private static func isPeriod(_ text: String) -> Bool {
        let bytes = Array(text.utf8)
        guard bytes.count >= 3, bytes.count <= 5, bytes.first == UInt8(ascii: "P"),
            let unit = bytes.last, [UInt8(ascii: "D"), UInt8(ascii: "W"), UInt8(ascii: "M"), UInt8(ascii: "Y")].contains(unit)
        else {
            return false
        }
        let digits = bytes[1..<(bytes.count - 1)]
        return digits.allSatisfy { $0 >= 0x30 && $0 <= 0x39 } && digits.first != 0x30
    }

    /// The contract as stored and served (keys in a stable order).
    var json: JSON {
        var root = JSONObject()
        if let description { root["description"] = .string(description) }
        var offeringsObject = JSONObject()
        for id in offerings.keys.sorted() {
            let offering = offerings[id]!
            var entry: JSONObject = ["products": .array(offering.products.map(\.json))]
            if let d = offering.description { entry["description"] = .string(d) }
            offeringsObject[id] = .object(entry)
        }
        root["offerings"] = .object(offeringsObject)
        var laddersObject = JSONObject()
        for id in ladders.keys.sorted() { laddersObject[id] = .array(ladders[id]!.map(JSON.string)) }
        root["ladders"] = .object(laddersObject)
        var placementsObject = JSONObject()
        for id in placements.keys.sorted() {
            let placement = placements[id]!
            switch placement.shows {
            case .ladder(let ladder): placementsObject[id] = ["ladder": .string(ladder), "eligible": .bool(placement.eligible)]
            case .offering(let offering): placementsObject[id] = ["offering": .string(offering), "eligible": .bool(placement.eligible)]
            }
        }
        root["placements"] = .object(placementsObject)
        if !subscriptionGroups.isEmpty {
            var groups = JSONObject()
            for id in subscriptionGroups.keys.sorted() { groups[id] = .array(subscriptionGroups[id]!.map(JSON.string)) }
            root["subscriptionGroups"] = .object(groups)
        }
        return .object(root)
    }
}

extension OfferingContract.Product {
    var json: JSON {
        var entry: JSONObject = ["productId": .string(productId)]
        if let introOffer { entry["introOffer"] = ["type": .string(introOffer.kind.rawValue), "period": .string(introOffer.period)] }
        if let promotionalOffer { entry["promotionalOffer"] = .string(promotionalOffer) }
        return .object(entry)
    }
}

struct OfferingContractError: Error, Sendable, CustomStringConvertible, ContractProblems {
    let problems: [String]
    var description: String { "invalid offerings contract: " + problems.joined(separator: "; ") }
}

extension OfferingContract: VersionedContract {
    static var versionsTable: StaticString { "offering_versions" }
    static var publishAction: String { "offerings.publish" }
}

/// The offerings contracts (`offering_versions`), cached per process.
typealias OfferingCatalog = ContractVersions<OfferingContract>
