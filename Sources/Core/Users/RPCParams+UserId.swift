extension RPCParams {
    /// A user id that matches `users.idPattern`.
    func requireUserId(_ key: String = "userId", pattern: UserIdPattern) throws(RPCError) -> String {
        let id = try requireString(key, maxLength: 128)
        guard pattern.matches(id) else {
            throw .invalidParams("\"\(key)\" does not match users.idPattern", field: key)
        }
        return id
    }
}

extension RPCParams {
    /// `requireUserId`, refused with 1005 `user_deleted` when that id was erased (SPEC §19):
    /// every admin method naming a user but `access.get` (which says so) and `users.delete`
    /// (idempotent) reads it through here.
    func requireLiveUserId(_ key: String = "userId", pattern: UserIdPattern, on db: DatabaseConnection) throws -> String {
        let id = try requireUserId(key, pattern: pattern)
        try ErasedUsers.refuseErased(id, on: db)
        return id
    }
}
