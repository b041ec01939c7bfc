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

    /// True for an id of 1…128 bytes that matches the pattern and is not a RevenueCat
    /// anonymous id (those never name a user, whatever the pattern).
    func matches(_ id: String) -> Bool {
        guard !id.isEmpty, id.utf8.count <= 128, !id.hasPrefix("$RCAnonymousID:"), !id.utf8.contains(0) else {
            return false
        }
        return regexec(regex, id, 0, nil, 0) == 0
    }

    static let uuid = UserIdPattern(BillingConfiguration.Users.uuidPattern)!
}
