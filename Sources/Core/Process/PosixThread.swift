import Glibc

/// The one way Core starts a thread: a POSIX thread running a Swift closure, joinable or
/// detached. Every daemon thread (worker threads, RPC connections, the metrics publisher)
/// starts here.
///
/// This lives in Core on purpose: a closure written in `main.swift`'s top-level code is
/// main-actor isolated in Swift 6, and running it on a foreign thread traps at run time.
struct PosixThread: Sendable {
    let id: pthread_t

    /// Starts `body` on a joinable thread; nil (with the error number) when the system refused.
    static func start(_ body: @escaping @Sendable () -> Void) -> Result<PosixThread, PosixThreadError> {
        create(body, detached: false).map { PosixThread(id: $0) }
    }

    /// Starts `body` on a detached thread; false when the system refused.
    static func detach(_ body: @escaping @Sendable () -> Void) -> Bool {
        (try? create(body, detached: true).get()) != nil
    }

    /// Waits for the thread to end.
    func join() {
        pthread_join(id, nil)
    }

    private static func create(_ body: @escaping @Sendable () -> Void, detached: Bool) -> Result<pthread_t, PosixThreadError> {
        let box = Unmanaged.passRetained(ThreadBody(body)).toOpaque()
        var attributes = pthread_attr_t()
        pthread_attr_init(&attributes)
        defer { pthread_attr_destroy(&attributes) }
        pthread_attr_setdetachstate(&attributes, Int32(detached ? PTHREAD_CREATE_DETACHED : PTHREAD_CREATE_JOINABLE))
        var thread = pthread_t()
        let status = pthread_create(
            &thread, &attributes,
            { raw in
                Unmanaged<ThreadBody>.fromOpaque(raw!).takeRetainedValue().run()
                return nil
            }, box)
        guard status == 0 else {
            Unmanaged<ThreadBody>.fromOpaque(box).release()
            return .failure(PosixThreadError(errno: status))
        }
        return .success(thread)
    }
}

/// `pthread_create` refused (EAGAIN: too many threads, or out of memory).
struct PosixThreadError: Error, Sendable {
    let errno: Int32
}

private final class ThreadBody: Sendable {
    let run: @Sendable () -> Void
    init(_ run: @escaping @Sendable () -> Void) { self.run = run }
}
