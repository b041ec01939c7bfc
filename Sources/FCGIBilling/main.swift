// billing-fcgi: one FastCGI worker process (a pool of threads on one Unix socket).
// Everything that thinks lives in Core; this file only hands over the process arguments.
import Core
import Glibc

exit(WorkerApp.main(arguments: Array(CommandLine.arguments.dropFirst()), environment: ProcessEnvironment.current()))
