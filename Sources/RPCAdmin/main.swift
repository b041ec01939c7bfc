// billing-rpc: the JSON-RPC admin daemon (and its `migrate` and `dev-token` commands).
// Everything lives in Core; this file only hands over the process arguments.
import Core
import Glibc

exit(RPCAdminApp.main(arguments: Array(CommandLine.arguments.dropFirst()), environment: ProcessEnvironment.current()))
