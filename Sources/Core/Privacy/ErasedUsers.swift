/// Erased users (SPEC §19) as the rest of the write and read paths see them: whether an id
/// was erased (`billing_erased_users` keeps the SHA-256 of each), the refusal of such an id
/// (410 / 1005 `user_deleted`), the lock that orders a request against an erasure of its
/// user, and what is personal in a stored payload. The erasure itself is `UserErasure`.
enum ErasedUsers {
    static let tombstonePrefix = "erased:"

    /// SHA-256 (hex) of the id's UTF-8 bytes: what `billing_erased_users` keeps.
    static func idHash(_ userId: String) -> String { SHA256.hexHash(Array(userId.utf8)) }

    /// When `userId` was erased, or nil.
    static func erasedAt(_ userId: String, on db: DatabaseConnection) throws(DatabaseError) -> Timestamp? {
        try db.queryOne("SELECT erased_at FROM billing_erased_users WHERE id_sha256 = \(idHash(userId))")?.timestamp("erased_at")
    }

    /// Throws `BillingError.userDeleted` (HTTP 410 `user_deleted`, JSON-RPC 1005) when
    /// `userId` was erased. One primary-key read.
    static func refuseErased(_ userId: String, on db: DatabaseConnection) throws {
        if try erasedAt(userId, on: db) != nil { throw BillingError.userDeleted(userId) }
    }

    /// Inside the caller's transaction: share-locks the user's row, so an erasure of him
    /// waits for this transaction or this one for the erasure (which holds the row from its
    /// first statement); then throws `userDeleted` when the id was erased. A user not known
    /// yet (no row) passes unless erased. One primary-key read when he exists.
    static func holdLive(_ userId: String, on db: DatabaseConnection) throws {
        if try db.queryOne("SELECT 1 AS live FROM billing_users WHERE id = \(userId) LOCK IN SHARE MODE") != nil { return }
        try refuseErased(userId, on: db)
    }

    /// Runs `body`, a write under the user's id; a foreign-key failure because he was erased
    /// meanwhile (his row went between the route's check and the write) is `userDeleted`
    /// (410), not a 500.
    static func whileLive<T>(_ userId: String, on db: DatabaseConnection, _ body: () throws -> T) throws -> T {
        do {
            return try body()
        } catch let error as DatabaseError where error.isConstraintViolation {
            try refuseErased(userId, on: db)
            throw error
        }
    }

    /// Which of `ids` were erased (one query).
    static func erased(_ ids: [String], on db: DatabaseConnection) throws(DatabaseError) -> Set<String> {
        guard !ids.isEmpty else { return [] }
        let byHash = Dictionary(ids.map { (idHash($0), $0) }, uniquingKeysWith: { first, _ in first })
        var result = Set<String>()
        for row in try db.query("SELECT id_sha256 FROM billing_erased_users WHERE id_sha256 IN (\(list: byHash.keys.sorted().map(SQLValue.string)))")
        {
            if let id = byHash[try row.string("id_sha256")] { result.insert(id) }
        }
        return result
    }
}

/// What is personal in a stored provider payload, and how it is scrubbed (SPEC §19).
enum PersonalData {
    /// Members removed wherever they appear: RevenueCat's customer attributes (`$email`,
    /// `$displayName`, `$phoneNumber`, push tokens, device ids, any custom attribute).
    static let removedMembers: Set<String> = ["subscriber_attributes", "attributes"]

    /// Members whose strings (or arrays of strings) are ids of the customer.
    static let identityMembers: Set<String> = [
        "app_user_id", "original_app_user_id", "aliases", "transferred_from",
        "transferred_to", "appAccountToken",
    ]

    /// Ids at least this long are also replaced inside longer strings.
    static let minimumEmbeddedLength = 16

    /// Stored payloads are at most what the routes accept.
    static let storedLimits = JSONLimits(maxBytes: 16 << 20, maxDepth: 64)

    /// Every id a payload gives its customer (`identityMembers`, at any depth).
    static func aliases(in payload: JSON) -> Set<String> {
        var found = Set<String>()
        func walk(_ value: JSON, identity: Bool) {
            switch value {
            case .string(let s) where identity: found.insert(s)
            case .array(let items): for item in items { walk(item, identity: identity) }
            case .object(let object):
                for (key, member) in object { walk(member, identity: identityMembers.contains(key)) }
            default: break
            }
        }
        walk(payload, identity: false)
        return found
    }

    /// `payload` with `removedMembers` gone and every string (value or member name) equal to
    /// one of `identities` (or, in an identity member, any anonymous RevenueCat id) replaced
    /// by `tombstone`, as is an identity of `minimumEmbeddedLength` or more inside a string.
    static func scrub(_ payload: JSON, identities: Set<String>, tombstone: String) -> JSON {
        // A long id inside a longer string (a URL, a note, an id built from it) goes too;
        // a short one only as a whole string (it could be a piece of anything).
        let embedded = identities.filter { $0.utf8.count >= minimumEmbeddedLength }.sorted { $0.utf8.count > $1.utf8.count }
        func replacingEmbedded(_ s: String) -> String {
            var out = s
            for id in embedded where out.contains(id) { out = out.replacing(id, with: tombstone) }
            return out
        }
        func clean(_ value: JSON, identity: Bool) -> JSON {
            switch value {
            case .string(let s):
                if identities.contains(s) || (identity && s.hasPrefix("$RCAnonymousID:")) { return .string(tombstone) }
                return .string(replacingEmbedded(s))
            case .array(let items):
                var out: [JSON] = []
                for item in items {
                    let cleaned = clean(item, identity: identity)
                    // One tombstone per list (a list of his aliases becomes one entry).
                    if identity, cleaned == .string(tombstone), out.contains(cleaned) { continue }
                    out.append(cleaned)
                }
                return .array(out)
            case .object(let object):
                var out = JSONObject()
                for (key, member) in object where !removedMembers.contains(key) {
                    out[identities.contains(key) ? tombstone : key] = clean(member, identity: identityMembers.contains(key))
                }
                return .object(out)
            default:
                return value
            }
        }
        return clean(payload, identity: false)
    }
}
