import Synchronization
import Testing

@testable import Core

/// The process skeleton's order (services start in order and stop in reverse; one that
/// cannot start stops those before it) and the periodic service every background task is.
@Suite struct ProcessLifecycleTests {
    final class Journal: Sendable {
        private let lines = Mutex<[String]>([])
        func add(_ line: String) { lines.withLock { $0.append(line) } }
        var all: [String] { lines.withLock { $0 } }
    }

    struct CannotStart: Error {}

    struct Recorded: ProcessLifecycle.Service {
        let name: String
        let journal: Journal
        var fails = false

        func start() throws {
            if fails { throw CannotStart() }
            journal.add("start \(name)")
        }

        func stop() { journal.add("stop \(name)") }
    }

    @Test func servicesStartInOrderAndStopInReverse() throws {
        let journal = Journal()
        let services = ["publisher", "refresher", "pool"].map { Recorded(name: $0, journal: journal) }
        let running = try #require(ProcessLifecycle.start(services, logger: .discarding))
        ProcessLifecycle.stop(running)
        #expect(
            journal.all == [
                "start publisher", "start refresher", "start pool", "stop pool", "stop refresher", "stop publisher",
            ])
    }

    @Test func aServiceThatCannotStartStopsTheOnesBeforeItAndNoneAfter() {
        let journal = Journal()
        let services = [
            Recorded(name: "a", journal: journal), Recorded(name: "b", journal: journal),
            Recorded(name: "c", journal: journal, fails: true), Recorded(name: "d", journal: journal),
        ]
        #expect(ProcessLifecycle.start(services, logger: .discarding) == nil)
        #expect(journal.all == ["start a", "start b", "stop b", "stop a"])
    }

    @Test func aPeriodicServiceStepsAtOnceThenEveryIntervalAndNeverAfterStop() throws {
        let steps = Atomic<Int>(0)
        let service = PeriodicService(name: "test", intervalMilliseconds: 5) {
            { _ in steps.add(1, ordering: .relaxed) }
        }
        try service.start()
        while steps.load(ordering: .relaxed) < 3 { sleepMilliseconds(1) }
        service.stop()
        let afterStop = steps.load(ordering: .relaxed)
        sleepMilliseconds(30)
        #expect(steps.load(ordering: .relaxed) == afterStop)
        service.stop()  // idempotent
    }

    @Test func stopWaitsForTheStepInProgressWhichSeesItAsked() throws {
        let journal = Journal()
        let entered = Atomic<Bool>(false)
        // A long interval: the stop must not wait for it.
        let service = PeriodicService(name: "test", intervalMilliseconds: 3_600_000) {
            let resource = "made on the service's thread"
            return { isStopping in
                entered.store(true, ordering: .releasing)
                while !isStopping() { sleepMilliseconds(1) }
                journal.add("step saw the stop, with \(resource)")
            }
        }
        try service.start()
        while !entered.load(ordering: .acquiring) { sleepMilliseconds(1) }
        service.stop()
        #expect(journal.all == ["step saw the stop, with made on the service's thread"])
    }

    @Test func aStopDuringThePauseEndsItWithoutAnotherStep() throws {
        let steps = Atomic<Int>(0)
        // An hour's pause: were the stop to wait for it, this test would not end.
        let service = PeriodicService(name: "test", intervalMilliseconds: 3_600_000) {
            { _ in steps.add(1, ordering: .relaxed) }
        }
        try service.start()
        while steps.load(ordering: .relaxed) < 1 { sleepMilliseconds(1) }
        sleepMilliseconds(20)
        service.stop()
        #expect(steps.load(ordering: .relaxed) == 1)
    }
}
