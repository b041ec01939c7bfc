// Parameter readers and context helpers shared by the admin methods.

extension RPCContextProtocol {
    /// This connection's database, or error 1004 when the daemon was started without one.
    func requireDatabase() throws(BillingError) -> DatabaseConnection {
        guard let database else { throw BillingError(.databaseRequired, "billing-rpc runs without a database (start it with --config)") }
        return database
    }
}

extension RPCParams {
    /// The operator named by a mutation: a non-empty string of at most 128 characters.
    func requireActor() throws(RPCError) -> String {
        let actor = try requireString("actor", maxLength: 128)
        guard !actor.allSatisfy(\.isWhitespace) else {
            throw .invalidParams("\"actor\" must not be empty", field: "actor")
        }
        return actor
    }

    /// A non-empty string (e.g. a reason or a campaign name).
    func requireNonEmptyString(_ key: String, maxLength: Int) throws(RPCError) -> String {
        let text = try requireString(key, maxLength: maxLength)
        guard !text.allSatisfy(\.isWhitespace) else {
            throw .invalidParams("\"\(key)\" must not be empty", field: key)
        }
        return text
    }

    /// A paid tier: `plus` or `pro`.
    func requireTier(_ key: String = "tier") throws(RPCError) -> Tier {
        Tier(rawValue: try requireString(key, oneOf: ["plus", "pro"]))!
    }
}
