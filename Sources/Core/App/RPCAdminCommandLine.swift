import Glibc

/// The arguments of `billing-rpc` (serving), parsed in Core so the executable stays wiring
/// only. The `migrate` and `dev-token` subcommands are parsed by `RPCAdminApp`.
struct RPCAdminCommandLine: Sendable, Equatable {
    var configPath: String?
    var logFile: String?
    /// Overrides `admin.socket` of the configuration.
    var socketPath: String?
    var maxConnections = 32
    var idleTimeoutSeconds = 300.0
    var readTimeoutSeconds = 10.0
    var showHelp = false

    init() {}

    static let usage = """
        usage: billing-rpc --config FILE [options]              serve JSON-RPC on admin.socket
               billing-rpc migrate [--config FILE] [--sql-dir DIR] [--status]
               billing-rpc doctor [--config FILE] [--sql-dir DIR] [--url URL] [--json]
               billing-rpc config-merge BASE OVERLAY                  print BASE deep-merged with OVERLAY
               billing-rpc --version
               billing-rpc dev-token --key PEM --kid KID --issuer ISS --audience AUD [--ttl SECONDS] USER_ID

        JSON-RPC 2.0 admin daemon, newline-delimited JSON on a Unix socket (mode 0660).
        SIGTERM/SIGINT: stop accepting, finish calls in flight, remove the socket, exit 0.
        SIGUSR1/SIGHUP: reopen the log file.

        options:
          --config FILE            configuration (JSON); BILLING__section__key env vars override it
          --socket PATH            Unix socket to listen on (default: admin.socket of the configuration)
          --log-file PATH          JSON-lines log (default: log.file, else standard error)
          --max-connections N      concurrent connections, one thread each (default 32)
          --idle-timeout SECONDS   close a connection silent for this long (default 300)
          --read-timeout SECONDS   close a connection that starts a line and stalls (default 10)
          -h, --help               this text

        """

    /// Parses the arguments after the program name.
    static func parse(_ arguments: [String]) throws(RPCServerError) -> RPCAdminCommandLine {
        do {
            return try scan(arguments)
        } catch {
            throw RPCServerError(error.message)
        }
    }

    private static func scan(_ arguments: [String]) throws(CommandLineScanner.UsageError) -> RPCAdminCommandLine {
        var result = RPCAdminCommandLine()
        var words = CommandLineScanner(arguments)
        while let argument = words.next() {
            switch argument {
            case "--socket": result.socketPath = try words.value(argument)
            case "--config": result.configPath = try words.value(argument)
            case "--log-file": result.logFile = try words.value(argument)
            case "--max-connections": result.maxConnections = try words.integer(argument, in: 1...Int(Int32.max))
            case "--idle-timeout": result.idleTimeoutSeconds = try words.positiveNumber(argument)
            case "--read-timeout": result.readTimeoutSeconds = try words.positiveNumber(argument)
            case "-h", "--help": result.showHelp = true
            default: throw CommandLineScanner.unknown(argument)
            }
        }
        if !result.showHelp && result.socketPath == nil && result.configPath == nil {
            throw CommandLineScanner.UsageError(message: "--config FILE (or --socket PATH) is required")
        }
        return result
    }

    /// The server configuration these arguments describe.
    func serverConfiguration() -> RPCSocketServerConfiguration {
        var configuration = RPCSocketServerConfiguration(socketPath: socketPath ?? "")
        configuration.maxConnections = maxConnections
        configuration.idleTimeoutSeconds = idleTimeoutSeconds
        configuration.readTimeoutSeconds = readTimeoutSeconds
        return configuration
    }
}

extension RPCAdminCommandLine {
    /// Prints `billing-rpc: message` to stderr and exits with `status` (64 = usage, EX_USAGE).
    static func exit(_ message: String, status: Int32) -> Never {
        let line = Array("billing-rpc: \(message)\n".utf8)
        _ = line.withUnsafeBytes { write(STDERR_FILENO, $0.baseAddress, $0.count) }
        Glibc.exit(status)
    }
}
