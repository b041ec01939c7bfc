/// The type of each parameter a method declares in its params line (`RPCMethod.paramsHelp`,
/// e.g. `{grantId: integer, actor, dryRun?: bool, userIds: [id]}`), for `system.listMethods`'
/// `paramTypes`: billing-admin reads `--grantId 7` as the integer 7 and `--idempotencyKey
/// 123` as the string "123", by the declaration and not by what the value looks like.
///
/// The params line's grammar: `{member, member | member, ...}` where a member is `name`,
/// `name?`, `name: type` or `name?: type`, optionally followed by a parenthesised note; a
/// type is `integer`, a range `1..1000`, `bool`/`boolean`/`true`, `object` or `{...}`,
/// `[element]`, or anything else (a string: `ISO-8601`, `plus|pro`, `"production"|"sandbox"`).
enum RPCParamType: Sendable, Equatable, CustomStringConvertible {
    case string, integer, boolean, object
    indirect case array(RPCParamType)

    var description: String {
        switch self {
        case .string: return "string"
        case .integer: return "integer"
        case .boolean: return "boolean"
        case .object: return "object"
        case .array(let element): return "array<\(element)>"
        }
    }

    /// The members of `help`'s outermost `{...}`, in order; empty for `none`.
    static func parse(_ help: String) -> [(name: String, type: RPCParamType)] {
        let characters = Array(help)
        guard let open = characters.firstIndex(of: "{") else { return [] }
        // Members split at depth 0 on `,` and `|`, each with the separator before it.
        var depth = 0
        var members: [(text: String, afterPipe: Bool)] = []
        var current = ""
        var afterPipe = false
        loop: for character in characters[(open + 1)...] {
            switch character {
            case "{", "[", "(":
                depth += 1
            case "}" where depth == 0:
                break loop
            case "}", "]", ")":
                depth -= 1
            case "," where depth == 0, "|" where depth == 0:
                members.append((current, afterPipe))
                current = ""
                afterPipe = character == "|"
                continue loop
            default:
                break
            }
            current.append(character)
        }
        members.append((current, afterPipe))
        var result: [(name: String, type: RPCParamType)] = []
        var previousTyped = false
        for (raw, afterPipe) in members {
            let member = raw.trimmingWhitespace
            guard !member.isEmpty else { continue }
            let (name, type, typed) = nameAndType(member)
            // `tier: plus|pro`: after a typed member, a `|` piece without a type of its own
            // is more of that type; `userId | originalTransactionId`: an alternative member.
            if afterPipe && previousTyped && !typed { continue }
            guard let name, let first = name.first, first.isLetter else { continue }
            result.append((name, classify(type)))
            previousTyped = typed
        }
        return result
    }

    /// The member's name, its type text, and whether it has one (`name: type`).
    private static func nameAndType(_ member: String) -> (String?, String, Bool) {
        var name = ""
        var rest = Substring(member)
        if rest.first == "\"" {
            rest = rest.dropFirst()
            guard let close = rest.firstIndex(of: "\"") else { return (nil, member, false) }
            name = String(rest[..<close])
            rest = rest[rest.index(after: close)...]
        } else {
            while let c = rest.first, c.isLetter || c.isNumber || c == "_" || c == "." {
                name.append(c)
                rest = rest.dropFirst()
            }
        }
        if rest.first == "?" { rest = rest.dropFirst() }
        let afterSpaces = rest.drop(while: { $0 == " " })
        guard afterSpaces.first == ":" else { return (name, "", false) }
        return (name, String(afterSpaces.dropFirst()).trimmingWhitespace, true)
    }

    private static func classify(_ type: String) -> RPCParamType {
        let lower = type.lowercased()
        if lower.hasPrefix("[") {
            let element = lower.dropFirst()
            if element.hasPrefix("integer") { return .array(.integer) }
            if element.hasPrefix("{") { return .array(.object) }
            return .array(.string)
        }
        if lower.hasPrefix("{") || lower.hasPrefix("object") { return .object }
        if lower.hasPrefix("integer") { return .integer }
        if lower.hasPrefix("bool") || lower.hasPrefix("true") || lower.hasPrefix("false") { return .boolean }
        if let first = lower.first, first.isNumber, lower.contains("..") { return .integer }
        return .string
    }
}

private extension String {
    var trimmingWhitespace: String {
        String(drop(while: { $0 == " " || $0 == "\n" }).reversed().drop(while: { $0 == " " || $0 == "\n" }).reversed())
    }
}
