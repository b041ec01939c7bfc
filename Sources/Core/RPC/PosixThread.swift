import Glibc

/// Starts `body` on a new detached POSIX thread; false when the system refused.
///
/// This lives in Core on purpose: a closure written in `main.swift`'s top-level code is
/// main-actor isolated in Swift 6, and running it on a foreign thread traps at run time.
func startDetachedThread(_ body: @escaping @Sendable () -> Void) -> Bool {
    let box = Unmanaged.passRetained(ThreadBody(body)).toOpaque()
    var attributes = pthread_attr_t()
    pthread_attr_init(&attributes)
    defer { pthread_attr_destroy(&attributes) }
    pthread_attr_setdetachstate(&attributes, Int32(PTHREAD_CREATE_DETACHED))
    var thread = pthread_t()
    let status = pthread_create(&thread, &attributes, { raw in
        Unmanaged<ThreadBody>.fromOpaque(raw!).takeRetainedValue().run()
        return nil
    }, box)
    guard status == 0 else {
        Unmanaged<ThreadBody>.fromOpaque(box).release()
        return false
    }
    return true
}

private final class ThreadBody: Sendable {
    let run: @Sendable () -> Void
    init(_ run: @escaping @Sendable () -> Void) { self.run = run }
}
