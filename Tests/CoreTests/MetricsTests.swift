import Glibc
import Testing

@testable import Core

@Suite struct MetricsTests {
    @Test func histogramBucketsAreCumulativeWithInf() {
        let histogram = MetricHistogram(bounds: [0.001, 0.01])
        histogram.observe(microseconds: 500)  // ≤ 1 ms
        histogram.observe(microseconds: 1000)  // = 1 ms: le="0.001" is inclusive
        histogram.observe(microseconds: 5000)  // ≤ 10 ms
        histogram.observe(microseconds: 2_000_000)  // +Inf
        let snapshot = histogram.snapshot
        #expect(snapshot.cumulative == [2, 3, 4])
        #expect(snapshot.count == 4)
        #expect(snapshot.sumSeconds == 2.0065)
    }

    @Test func routerNamesTheMatchedPattern() {
        var router = Router<BillingRequestContext>()
        router.get("/api/v1/things/:id", { _, _ in .json(.ok, [:]) })
        router.post("/api/v1/ping", { _, _ in .json(.ok, [:]) })
        #expect(router.patterns == ["/api/v1/things/:id", "/api/v1/ping"])
        #expect(router.pattern(matching: "/api/v1/things/42") == "/api/v1/things/:id")
        #expect(router.pattern(matching: "/api/v1/ping") == "/api/v1/ping")
        #expect(router.pattern(matching: "/nope") == nil)
    }

    @Test func workerNameIsTheSocketFileName() {
        #expect(WorkerMetrics.workerName(socketPath: "/run/fcgibilling/worker-3.sock") == "worker-3")
        #expect(MetricsDirectory.beside(socketPath: "/run/fcgibilling/worker-3.sock").path == "/run/fcgibilling/metrics")
    }

    private func metrics(_ name: String, domain: BillingMetrics = BillingMetrics()) -> WorkerMetrics {
        WorkerMetrics(
            worker: name, threads: 4, routes: ["/api/v1/ping", "/api/v1/billing/usage"],
            startedAt: Timestamp(secondsSinceEpoch: 1_700_000_000), domain: domain)
    }

    @Test func exposition_groupsFamiliesAndLabelsEveryWorker() throws {
        let domain = BillingMetrics()
        domain.webhook(.revenuecat, .duplicate)
        domain.usageDecision(.refused)
        domain.databaseError(.unavailable)
        let one = metrics("worker-1", domain: domain)
        one.record(route: "/api/v1/ping", status: 200, microseconds: 300)
        one.record(route: nil, status: 404, microseconds: 100)
        one.record(route: "/api/v1/billing/usage", status: 418, microseconds: 100)
        let two = metrics("worker-2", domain: domain)
        two.record(route: "/api/v1/ping", status: 200, microseconds: 300)
        let now = Timestamp(secondsSinceEpoch: 1_700_000_100)
        let text = MetricsExposition.render([two.snapshot(now: now), one.snapshot(now: now)])

        #expect(text.contains("billing_metrics_workers 2\n"))
        #expect(text.contains(#"billing_http_requests_total{worker="worker-1",route="/api/v1/ping",status="200"} 1"#))
        #expect(text.contains(#"billing_http_requests_total{worker="worker-2",route="/api/v1/ping",status="200"} 1"#))
        #expect(text.contains(#"billing_http_requests_total{worker="worker-1",route="unmatched",status="404"} 1"#))
        #expect(text.contains(#"billing_http_requests_total{worker="worker-1",route="/api/v1/billing/usage",status="other"} 1"#))
        #expect(text.contains(#"billing_http_request_duration_seconds_bucket{worker="worker-1",route="/api/v1/ping",le="+Inf"} 1"#))
        #expect(text.contains(#"billing_webhook_events_total{worker="worker-1",provider="revenuecat",outcome="duplicate"} 1"#))
        #expect(text.contains(#"billing_webhook_events_total{worker="worker-1",provider="apple",outcome="quarantined"} 0"#))
        #expect(text.contains(#"billing_usage_decisions_total{worker="worker-2",outcome="refused"} 1"#))
        #expect(text.contains(#"billing_db_errors_total{worker="worker-1",kind="unavailable"} 1"#))
        #expect(text.contains(#"billing_worker_threads{worker="worker-2"} 4"#))
        // Each family's TYPE appears once, and all its samples follow it before the next family.
        var seen: [String] = []
        var current = ""
        for line in text.split(separator: "\n") {
            if line.hasPrefix("# TYPE ") {
                current = String(line.split(separator: " ")[2])
                #expect(!seen.contains(current))
                seen.append(current)
            } else if !line.hasPrefix("#") {
                #expect(line.hasPrefix(current), "\(line) outside its family \(current)")
            }
        }
    }

    @Test func labelValuesAreEscaped() {
        #expect(MetricsExposition.escape("a\"b\\c\nd") == "a\\\"b\\\\c\\nd")
    }

    @Test func snapshotRoundTripsThroughJSON() throws {
        let one = metrics("worker-1")
        one.record(route: "/api/v1/ping", status: 200, microseconds: 300)
        one.served.add()
        let snapshot = one.snapshot(now: Timestamp(secondsSinceEpoch: 1_700_000_100))
        let parsed = try #require(WorkerSnapshot(json: try JSON.parse(snapshot.json.serialized())))
        #expect(parsed.worker == "worker-1")
        #expect(parsed.requestsServed == 1)
        #expect(MetricsExposition.render([parsed]) == MetricsExposition.render([snapshot]))
    }

    @Test func directoryPublishesAtomicallyAndSkipsStaleOrDeadWorkers() throws {
        let path = "/tmp/billing-metrics-test-\(getpid())"
        mkdir(path, 0o700)
        defer {
            for name in (try? FileIO.list(path)) ?? [] { unlink("\(path)/\(name)") }
            rmdir(path)
        }
        let directory = MetricsDirectory(path: path)
        let now = Timestamp(secondsSinceEpoch: 1_700_000_100)
        let live = metrics("worker-1").snapshot(now: now)
        var stale = metrics("worker-2").snapshot(now: Timestamp(secondsSinceEpoch: 1_700_000_000))
        stale.worker = "worker-2"
        var dead = metrics("worker-3").snapshot(now: now)
        dead.pid = 999_999_999
        #expect(directory.publish(live))
        #expect(directory.publish(stale))
        #expect(directory.publish(dead))
        #expect(try FileIO.list(path) == ["worker-1.json", "worker-2.json", "worker-3.json"])
        #expect(directory.readAll(now: now).map(\.worker) == ["worker-1"])
        directory.remove(worker: "worker-1")
        #expect(directory.readAll(now: now).isEmpty)
    }

    @Test func publisherRemovesItsFileOnStopAndNeverWritesAfter() throws {
        let path = "/tmp/billing-metrics-pub-\(getpid())"
        defer {
            for name in (try? FileIO.list(path)) ?? [] { unlink("\(path)/\(name)") }
            rmdir(path)
        }
        let publisher = MetricsPublisher(
            metrics: metrics("worker-9"), directory: MetricsDirectory(path: path),
            intervalMilliseconds: 10)
        try publisher.start()
        #expect(FileIO.exists("\(path)/worker-9.json"))
        publisher.stop()
        #expect(!publisher.publishOnce())
        usleep(30_000)
        #expect(!FileIO.exists("\(path)/worker-9.json"))
    }
}
