import Core
import Glibc

// billing-fcgi: one FastCGI worker process (a pool of threads on one Unix socket).
// Everything that thinks lives in Core; this file parses arguments and wires.

let usage = """
    usage: billing-fcgi --socket PATH [--threads N] [--max-body BYTES] [--socket-mode OCTAL] [--max-requests N]

      --socket PATH        Unix socket to listen on (nginx's upstream server unix:PATH)
      --threads N          worker threads, each accepting on the socket (default 4)
      --max-body BYTES     largest request body; larger is answered 413 (default 1048576)
      --socket-mode OCTAL  mode of the socket file (default 0660)
      --max-requests N     stop gracefully after N requests, for a supervisor to restart (default 0: never)

    Signals: TERM/INT/QUIT stop accepting, finish in-flight requests and exit 0; USR1/HUP reopen logs.

    """

func fail(_ message: String) -> Never {
    let text = Array("billing-fcgi: \(message)\n\(usage)".utf8)
    _ = text.withUnsafeBytes { write(STDERR_FILENO, $0.baseAddress, $0.count) }
    exit(64)
}

var options = FastCGIServerOptions(socketPath: "")
var arguments = CommandLine.arguments.dropFirst()
while let argument = arguments.popFirst() {
    if argument == "--help" || argument == "-h" {
        print(usage, terminator: "")
        exit(0)
    }
    guard let value = arguments.popFirst() else { fail("missing value for \(argument)") }
    switch argument {
    case "--socket": options.socketPath = value
    case "--threads":
        guard let n = Int(value), (1...1024).contains(n) else { fail("--threads must be 1...1024") }
        options.pool.threads = n
    case "--max-body":
        guard let n = Int(value), n >= 0 else { fail("--max-body must be a non-negative integer") }
        options.pool.maxBodyBytes = n
    case "--socket-mode":
        guard let mode = UInt32(value, radix: 8), mode <= 0o777 else { fail("--socket-mode must be octal, e.g. 0660") }
        options.socketMode = mode
    case "--max-requests":
        guard let n = Int(value), n >= 0 else { fail("--max-requests must be a non-negative integer") }
        options.pool.maxRequests = n
    default: fail("unknown option \(argument)")
    }
}
guard !options.socketPath.isEmpty else { fail("--socket is required") }

exit(FastCGIServer.run(options: options, router: BillingRoutes.makeRouter(),
                       makeContext: FastCGIServer.contextFactory()))
