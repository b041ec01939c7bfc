extension RPCAdminApp {
    // MARK: config-merge

    static let configMergeUsage = """
        usage: billing-rpc config-merge BASE OVERLAY

        Prints BASE (a JSON object) with OVERLAY (a JSON object) deep-merged over it, as compact
        JSON: objects merge key by key, any other value of OVERLAY replaces BASE's, and a secret
        and its file form are one setting (an overlay's `passwordFile` removes the base's
        `password`, and the reverse), as for the daemons' BILLING__ overrides. scripts/lib/stack.sh
        merges BILLING_CONFIG_OVERLAY over the generated configuration with it.
        Exit status: 0 printed, 1 a file unreadable or not a JSON object, 64 usage.

        """

    static func configMerge(_ arguments: [String]) -> Int32 {
        var words = CommandLineScanner(arguments)
        var paths: [String] = []
        while let argument = words.next() {
            if argument == "-h" || argument == "--help" {
                print(configMergeUsage, terminator: "")
                return 0
            }
            guard paths.count < 2, !argument.hasPrefix("-") else {
                return configMergeFailure("\(CommandLineScanner.unknown(argument))\n\n\(configMergeUsage)", status: 64)
            }
            paths.append(argument)
        }
        guard paths.count == 2 else {
            return configMergeFailure("BASE and OVERLAY are required\n\n\(configMergeUsage)", status: 64)
        }
        do throws(ConfigurationError) {
            let merged = try configObject(paths[0]).deepMerging(try configObject(paths[1]))
            print(JSON.object(merged).serializedString())
            return 0
        } catch {
            return configMergeFailure("config-merge: \(error)", status: 1)
        }
    }

    /// The JSON object in the file at `path`, read with the configuration's size limit.
    private static func configObject(_ path: String) throws(ConfigurationError) -> JSONObject {
        let bytes: [UInt8]
        do { bytes = try FileIO.read(path, maxBytes: 4 << 20) } catch { throw ConfigurationError("\(path): \(error)") }
        let json: JSON
        do { json = try JSON.parse(bytes) } catch { throw ConfigurationError("\(path): \(error)") }
        guard case .object(let object) = json else { throw ConfigurationError("\(path): expected a JSON object") }
        return object
    }

    private static func configMergeFailure(_ message: String, status: Int32) -> Int32 {
        ProcessEnvironment.printError("billing-rpc: \(message)")
        return status
    }
}
