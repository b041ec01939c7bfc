import Glibc

/// Who may use the admin socket: the uids the kernel reports for a connection's peer
/// (`SO_PEERCRED`, taken at connect time, so a client cannot claim another identity). A
/// refused peer gets one error line and is closed before anything it sent is read.
struct RPCPeerPolicy: Sendable, Equatable {
    let allowedUIDs: Set<UInt32>

    init(allowedUIDs: Set<UInt32>) {
        self.allowedUIDs = allowedUIDs
    }

    /// `admin.allowedUsers` resolved to uids: each entry a numeric uid or a user name known
    /// to the system (an unknown name is a start-up error, not a silent hole). Empty: root
    /// and the daemon's own (effective) user.
    static func resolving(_ users: [String]) throws(ConfigurationError) -> RPCPeerPolicy {
        guard !users.isEmpty else { return RPCPeerPolicy(allowedUIDs: [0, geteuid()]) }
        var uids = Set<UInt32>()
        for user in users {
            if let uid = UInt32(user) {
                uids.insert(uid)
            } else if let uid = SystemUsers.uid(named: user) {
                uids.insert(uid)
            } else {
                throw ConfigurationError("admin.allowedUsers: no such user \"\(user)\"")
            }
        }
        return RPCPeerPolicy(allowedUIDs: uids)
    }

    /// A peer whose credentials could not be read is refused.
    func admits(_ peer: RPCPeer?) -> Bool {
        guard let peer else { return false }
        return allowedUIDs.contains(peer.uid)
    }
}

/// The system's user database (NSS: /etc/passwd and whatever else is configured).
enum SystemUsers {
    static func uid(named name: String) -> UInt32? {
        withEntry { entry, buffer, result in getpwnam_r(name, &entry, buffer.baseAddress!, buffer.count, &result) }?.uid
    }

    static func name(of uid: UInt32) -> String? {
        withEntry { entry, buffer, result in getpwuid_r(uid, &entry, buffer.baseAddress!, buffer.count, &result) }?.name
    }

    private static func withEntry(_ lookup: (inout passwd, UnsafeMutableBufferPointer<CChar>, inout UnsafeMutablePointer<passwd>?) -> Int32)
        -> (uid: UInt32, name: String)?
    {
        var buffer = [CChar](repeating: 0, count: 4096)
        return buffer.withUnsafeMutableBufferPointer { storage -> (uid: UInt32, name: String)? in
            var entry = passwd()
            var result: UnsafeMutablePointer<passwd>?
            // The entry's strings point into `storage`: copied out before it goes away.
            guard lookup(&entry, storage, &result) == 0, result != nil, let name = entry.pw_name else { return nil }
            return (entry.pw_uid, String(cString: name))
        }
    }
}
