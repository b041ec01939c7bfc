// billing-rpc: wiring only. Arguments, methods and the server all live in Core.
import Core
import Glibc

let version = "0.1.0"

let commandLine: RPCAdminCommandLine
do {
    commandLine = try RPCAdminCommandLine.parse(Array(CommandLine.arguments.dropFirst()))
} catch {
    RPCAdminCommandLine.exit("\(error)\n\n\(RPCAdminCommandLine.usage)", status: 64)
}
if commandLine.showHelp {
    print(RPCAdminCommandLine.usage, terminator: "")
    exit(0)
}

var registry = RPCMethodRegistry()
registry.registerSystemMethods()

let server = RPCSocketServer(configuration: commandLine.serverConfiguration(), registry: registry,
                             serverInfo: RPCServerInfo(version: version))
do {
    try server.runUntilTerminated()
} catch {
    RPCAdminCommandLine.exit("\(error)", status: 1)
}
exit(0)
