import Glibc

/// The standard `process_*` gauges of Prometheus's client libraries for this process, read
/// from the kernel at publish time (`getrusage`, `/proc/self/statm`, `/proc/self/fd`), and
/// `billing_build_info`.
enum ProcessStats {
    static let families: [MetricsExposition.Family] = [
        .init(name: "process_start_time_seconds", type: "gauge", help: "Start time of the process since the epoch, in seconds."),
        .init(name: "process_cpu_seconds_total", type: "counter", help: "User and system CPU time the process spent, in seconds."),
        .init(name: "process_resident_memory_bytes", type: "gauge", help: "Resident memory size of the process, in bytes."),
        .init(name: "process_virtual_memory_bytes", type: "gauge", help: "Virtual memory size of the process, in bytes."),
        .init(name: "process_open_fds", type: "gauge", help: "Open file descriptors of the process."),
        .init(name: "process_max_fds", type: "gauge", help: "The process's limit on open file descriptors."),
        .init(name: "billing_build_info", type: "gauge", help: "The running build (value 1), labelled with its version."),
    ]

    static func samples(startedAt: Timestamp) -> [MetricSample] {
        var samples = [MetricSample("process_start_time_seconds", [:], Double(startedAt.millisecondsSinceEpoch) / 1000)]
        var usage = rusage()
        if getrusage(RUSAGE_SELF.rawValue, &usage) == 0 {
            let seconds =
                Double(usage.ru_utime.tv_sec + usage.ru_stime.tv_sec)
                + Double(usage.ru_utime.tv_usec + usage.ru_stime.tv_usec) / 1_000_000
            samples.append(MetricSample("process_cpu_seconds_total", [:], seconds))
        }
        if let (virtual, resident) = memory() {
            samples.append(MetricSample("process_resident_memory_bytes", [:], Double(resident)))
            samples.append(MetricSample("process_virtual_memory_bytes", [:], Double(virtual)))
        }
        if let open = openDescriptors() { samples.append(MetricSample("process_open_fds", [:], Double(open))) }
        var limit = rlimit()
        if getrlimit(Int32(RLIMIT_NOFILE.rawValue), &limit) == 0 {
            samples.append(MetricSample("process_max_fds", [:], Double(limit.rlim_cur)))
        }
        samples.append(MetricSample("billing_build_info", ["version": BuildInfo.version], 1))
        return samples
    }

    /// `/proc/self/statm`: total and resident size, in pages.
    private static func memory() -> (UInt64, UInt64)? {
        guard let bytes = try? FileIO.read("/proc/self/statm", maxBytes: 256) else { return nil }
        let fields = String(decoding: bytes, as: UTF8.self).split(separator: " ").compactMap { UInt64($0.filter { $0 != "\n" }) }
        guard fields.count >= 2 else { return nil }
        let page = UInt64(max(1, sysconf(Int32(_SC_PAGESIZE))))
        return (fields[0] * page, fields[1] * page)
    }

    private static func openDescriptors() -> Int? {
        guard let directory = opendir("/proc/self/fd") else { return nil }
        defer { closedir(directory) }
        var count = 0
        while let entry = readdir(directory) {
            if entry.pointee.d_name.0 != 46 { count += 1 }  // not "." nor ".."
        }
        return max(0, count - 1)  // the descriptor opendir holds
    }
}
