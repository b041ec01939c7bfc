import Glibc
import Synchronization

/// Where worker processes publish their snapshots (`<worker>.json`, replaced atomically by
/// rename every second) and where the metrics route, `system.health` and
/// `scripts/workerctl status` read all of them back. One file per worker, written only by
/// that worker: no locking between processes, and a reader never sees a torn file.
struct MetricsDirectory: Sendable {
    let path: String
    /// A snapshot older than this (or of a process that is gone) is a dead worker's leftover.
    var maxAgeMilliseconds: Int64 = 10_000

    init(path: String) { self.path = path }

    /// The default next to a socket: `/run/x/worker-1.sock` → `/run/x/metrics`.
    static func beside(socketPath: String) -> MetricsDirectory {
        var parts = socketPath.split(separator: "/", omittingEmptySubsequences: false)
        parts.removeLast()
        let directory = parts.isEmpty ? "." : parts.joined(separator: "/")
        return MetricsDirectory(path: (directory.isEmpty ? "" : directory) + "/metrics")
    }

    /// The directory billing-rpc and the doctor read: `server.metricsDirectory`, else the
    /// default beside the admin socket.
    static func of(_ configuration: BillingConfiguration) -> MetricsDirectory {
        configuration.server.metricsDirectory.map(MetricsDirectory.init(path:)) ?? beside(socketPath: configuration.admin.socket)
    }

    func file(for worker: String) -> String { "\(path)/\(worker).json" }

    /// Creates the directory (mode 0750) when missing.
    func create() {
        mkdir(path, 0o750)
    }

    /// Writes `snapshot` to a temporary file and renames it over the worker's file.
    @discardableResult
    func publish(_ snapshot: WorkerSnapshot) -> Bool {
        let target = file(for: snapshot.worker)
        let temporary = target + ".tmp"
        var bytes = snapshot.json.serialized()
        bytes.append(0x0A)
        let fd = open(temporary, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0o640)
        guard fd >= 0 else { return false }
        var offset = 0
        while offset < bytes.count {
            let n = bytes.withUnsafeBytes { Glibc.write(fd, $0.baseAddress! + offset, $0.count - offset) }
            if n < 0 && errno == EINTR { continue }
            if n <= 0 {
                close(fd)
                unlink(temporary)
                return false
            }
            offset += n
        }
        close(fd)
        return rename(temporary, target) == 0
    }

    func remove(worker: String) {
        unlink(file(for: worker))
    }

    /// Every fresh snapshot, by worker name. Skips stale files, files of processes that no
    /// longer exist, and anything unreadable.
    func readAll(now: Timestamp) -> [WorkerSnapshot] {
        guard let names = try? FileIO.list(path) else { return [] }
        var snapshots: [WorkerSnapshot] = []
        for name in names where name.hasSuffix(".json") {
            guard let bytes = try? FileIO.read("\(path)/\(name)", maxBytes: 1 << 20),
                let json = try? JSON.parse(bytes), let snapshot = WorkerSnapshot(json: json)
            else { continue }
            guard now.millisecondsSinceEpoch - snapshot.publishedAt.millisecondsSinceEpoch <= maxAgeMilliseconds else { continue }
            guard kill(Int32(snapshot.pid), 0) == 0 || errno == EPERM else { continue }
            snapshots.append(snapshot)
        }
        return snapshots
    }
}

/// A worker's metrics publisher: its snapshot published at start and then every
/// `interval` (a `PeriodicService`), and removed on a graceful stop.
final class MetricsPublisher: ProcessLifecycle.Service, Sendable {
    private let metrics: WorkerMetrics
    private let directory: MetricsDirectory
    private let clock: any BillingClock
    private let periodic = Mutex<PeriodicService?>(nil)
    private let intervalMilliseconds: Int64
    /// Serializes a publish with `stop()`'s removal, so a stopped worker never leaves its
    /// file behind. Taken once a second, never by requests.
    private let stopped = Mutex<Bool>(false)

    init(
        metrics: WorkerMetrics, directory: MetricsDirectory, clock: any BillingClock = SystemClock(),
        intervalMilliseconds: Int = 1000
    ) {
        self.metrics = metrics
        self.directory = directory
        self.clock = clock
        self.intervalMilliseconds = Int64(max(10, intervalMilliseconds))
    }

    /// Publishes at once (the file is there before the worker accepts), then every interval
    /// on a thread of its own.
    func start() throws {
        directory.create()
        publishOnce()
        let service = PeriodicService(name: "metrics publisher", intervalMilliseconds: intervalMilliseconds) { [self] in
            { _ in self.publishOnce() }
        }
        try service.start()
        periodic.withLock { $0 = service }
    }

    /// Publishes now unless stopped; false once stopped.
    @discardableResult
    func publishOnce() -> Bool {
        stopped.withLock { stopped in
            guard !stopped else { return false }
            directory.publish(metrics.snapshot(now: clock.now()))
            return true
        }
    }

    func stop() {
        periodic.withLock { $0 }?.stop()
        stopped.withLock { stopped in
            stopped = true
            directory.remove(worker: metrics.worker)
        }
    }
}
