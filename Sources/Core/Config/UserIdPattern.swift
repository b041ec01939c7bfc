import Glibc

/// `users.idPattern`: which provider-side ids can name a user. A POSIX extended regular
/// expression compiled once; `regexec` on a compiled pattern is thread-safe (POSIX), so
/// one instance serves every worker thread.
final class UserIdPattern: @unchecked Sendable {
    // Written once by regcomp in init, then only read by regexec, which POSIX allows from
    // several threads at once. Heap-allocated so no Swift inout access (and its exclusivity
    // check) happens per call.
    private let regex: UnsafeMutablePointer<regex_t>
    let pattern: String

    init?(_ pattern: String) {
        let compiled = UnsafeMutablePointer<regex_t>.allocate(capacity: 1)
        compiled.initialize(to: regex_t())
        guard regcomp(compiled, pattern, REG_EXTENDED | REG_NOSUB) == 0 else {
            compiled.deallocate()
            return nil
        }
        self.regex = compiled
        self.pattern = pattern
    }

    deinit {
        regfree(regex)
        regex.deallocate()
    }

    /// True for a well-formed id (`isWellFormed`) that matches the pattern and is not a
    /// RevenueCat anonymous id (those never name a user, whatever the pattern).
    func matches(_ id: String) -> Bool {
        guard Self.isWellFormed(id), !id.hasPrefix("$RCAnonymousID:") else { return false }
        return regexec(regex, id, 0, nil, 0) == 0
    }

    /// What any user id must be, whatever `users.idPattern` says (SPEC §19): 1…128 bytes, no
    /// control character anywhere (C0, DEL, C1), no whitespace at either end. So an id never
    /// differs from another only by invisible bytes an issuer, a log or a terminal would
    /// drop, and `"<id> "` never names `<id>`'s rows.
    static func isWellFormed(_ id: String) -> Bool {
        guard !id.isEmpty, id.utf8.count <= 128, let first = id.unicodeScalars.first, let last = id.unicodeScalars.last,
            !first.properties.isWhitespace, !last.properties.isWhitespace
        else { return false }
        return !id.unicodeScalars.contains { $0.properties.generalCategory == .control }
    }

    static let uuid = UserIdPattern(BillingConfiguration.Users.uuidPattern)!
}
