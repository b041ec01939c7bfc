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
