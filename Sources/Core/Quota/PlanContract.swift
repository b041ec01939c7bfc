/// One immutable, numbered plan contract (`plan_versions`): per tier, what the user may do
/// (capabilities) and how much (a limit per meter and window). SPEC §7, seeds/000 and 003.
///
/// ```json
/// {"tiers": {"free": {"capabilities": ["explorePlayback"],
///                     "meters": {"recurringGeneration": {"limit": 1, "window": {"days": 7}}}},
///            "trial": {"capabilities": [...], "meters": {"recurringGeneration": {"limit": 1, "window": "trial"}}},
///            "plus": {...}, "pro": {...}}}
/// ```
/// A meter absent from a tier is not available in it (limit 0); `"limit": null` is unlimited.
struct PlanContract: Sendable, Equatable {
    /// The tiers a contract must define: `trial` is the store trial of a paid tier.
    enum PlanTier: String, Sendable, CaseIterable {
        case free, trial, plus, pro
    }

    enum Window: Sendable, Equatable {
        /// Fixed windows of this many days, anchored at the user's sign-up.
        case days(Int)
        /// The whole trial period, counted once.
        case trial
    }

    struct Meter: Sendable, Equatable {
        /// nil = unlimited.
        var limit: Int64?
        var window: Window
        /// The paywall placement the app shows when this meter refuses (402).
        var placement: String?
    }

    struct TierPlan: Sendable, Equatable {
        var capabilities: [String]
        var meters: [String: Meter]
    }

    var tiers: [PlanTier: TierPlan]
    var description: String?

    /// Every meter named by any tier, sorted.
    var meterNames: [String] { Set(tiers.values.flatMap(\.meters.keys)).sorted() }

    /// Validates `json` fully; every problem is reported with its path.
    init(json: JSON) throws(PlanContractError) {
        var problems: [String] = []
        guard let root = json.objectValue, let tiersJSON = root["tiers"]?.objectValue else {
            throw PlanContractError(problems: ["tiers: required object"])
        }
        for key in root.keys where key != "tiers" && key != "description" { problems.append("\(key): unknown key") }
        var tiers: [PlanTier: TierPlan] = [:]
        for name in tiersJSON.keys where PlanTier(rawValue: name) == nil { problems.append("tiers.\(name): unknown tier") }
        for tier in PlanTier.allCases {
            let path = "tiers.\(tier.rawValue)"
            guard let plan = tiersJSON[tier.rawValue]?.objectValue else {
                problems.append("\(path): required object")
                continue
            }
            var capabilities: [String] = []
            if let list = plan["capabilities"]?.arrayValue {
                for (index, item) in list.enumerated() {
                    if let name = item.stringValue, PlanContract.isIdentifier(name) {
                        capabilities.append(name)
                    } else {
                        problems.append("\(path).capabilities[\(index)]: expected an identifier string")
                    }
                }
                if Set(capabilities).count != capabilities.count { problems.append("\(path).capabilities: duplicates") }
            } else {
                problems.append("\(path).capabilities: required array")
            }
            var meters: [String: Meter] = [:]
            if let metersJSON = plan["meters"]?.objectValue {
                for (name, value) in metersJSON {
                    let meterPath = "\(path).meters.\(name)"
                    guard PlanContract.isIdentifier(name) else {
                        problems.append("\(meterPath): invalid meter name")
                        continue
                    }
                    var limit: Int64?
                    switch value["limit"] {
                    case .null?: limit = nil
                    case let v? where (v.int64Value ?? -1) >= 0: limit = v.int64Value
                    default:
                        problems.append("\(meterPath).limit: expected a non-negative integer or null")
                        continue
                    }
                    let window: Window
                    switch value["window"] {
                    case .string("trial")?:
                        guard tier == .trial else {
                            problems.append("\(meterPath).window: \"trial\" only in the trial tier")
                            continue
                        }
                        window = .trial
                    case let v? where (1...366).contains(v["days"]?.intValue ?? 0):
                        window = .days(v["days"]!.intValue!)
                    default:
                        problems.append("\(meterPath).window: expected {\"days\": 1...366} or \"trial\"")
                        continue
                    }
                    var placement: String?
                    if let p = value["placement"], !p.isNull {
                        guard let text = p.stringValue, PlanContract.isIdentifier(text) else {
                            problems.append("\(meterPath).placement: expected an identifier string")
                            continue
                        }
                        placement = text
                    }
                    for key in value.objectValue?.keys ?? [] where !["limit", "window", "placement"].contains(key) {
                        problems.append("\(meterPath).\(key): unknown key")
                    }
                    meters[name] = Meter(limit: limit, window: window, placement: placement)
                }
            } else {
                problems.append("\(path).meters: required object")
            }
            tiers[tier] = TierPlan(capabilities: capabilities, meters: meters)
        }
        if let d = root["description"], d.stringValue == nil { problems.append("description: expected a string") }
        guard problems.isEmpty else { throw PlanContractError(problems: problems) }
        self.tiers = tiers
        self.description = root["description"]?.stringValue
    }

    private static func isIdentifier(_ s: String) -> Bool {
        !s.isEmpty && s.utf8.count <= 64
            && s.utf8.allSatisfy { ($0 >= 0x30 && $0 <= 0x39) || ($0 >= 0x41 && $0 <= 0x5A) || ($0 >= 0x61 && $0 <= 0x7A) || $0 == 0x5F }
            && !(s.utf8.first! >= 0x30 && s.utf8.first! <= 0x39)
    }

    /// The contract as stored and served (keys sorted for a stable text).
    var json: JSON {
        var tiersObject = JSONObject()
        for tier in PlanTier.allCases {
            guard let plan = tiers[tier] else { continue }
            var meters = JSONObject()
            for name in plan.meters.keys.sorted() {
                let meter = plan.meters[name]!
                let window: JSON
                switch meter.window {
                case .days(let days): window = ["days": .int(Int64(days))]
                case .trial: window = "trial"
                }
                var entry: JSONObject = ["limit": meter.limit.map(JSON.int) ?? .null, "window": window]
                if let placement = meter.placement { entry["placement"] = .string(placement) }
                meters[name] = .object(entry)
            }
            tiersObject[tier.rawValue] = ["capabilities": .array(plan.capabilities.map(JSON.string)), "meters": .object(meters)]
        }
        var root: JSONObject = ["tiers": .object(tiersObject)]
        if let description { root["description"] = .string(description) }
        return .object(root)
    }
}

struct PlanContractError: Error, Sendable, CustomStringConvertible {
    let problems: [String]
    var description: String { "invalid plan contract: " + problems.joined(separator: "; ") }
}
