extension RPCParams {
    /// A store environment in any spelling the providers use (`production`, `Production`,
    /// `PRODUCTION`; likewise sandbox). Here, beside `StoreEnvironment`: the RPC framework
    /// names no feature type.
    func requireEnvironment(_ key: String = "environment") throws(RPCError) -> StoreEnvironment {
        let text = try requireString(key)
        guard let environment = StoreEnvironment(rawValue: text.lowercased()) else {
            throw .invalidParams("\"\(key)\" must be one of \"production\", \"sandbox\" (any case)", field: key)
        }
        return environment
    }
}
