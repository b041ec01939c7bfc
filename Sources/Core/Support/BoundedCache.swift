import Synchronization

/// A process-wide map with bounded memory and approximately-LRU eviction, safe to share
/// between threads.
///
/// Two generations of at most `capacity` keys each: lookups promote a key from the old
/// generation to the young one; when the young one is full it becomes the old one and the
/// previous old one is dropped. So a key used since the last turnover always survives the
/// next one, and memory never exceeds 2 × `capacity` entries. Every operation is O(1)
/// under one short lock.
final class BoundedCache<Key: Hashable & Sendable, Value: Sendable>: Sendable {
    private struct Generations {
        var young: [Key: Value] = [:]
        var old: [Key: Value] = [:]
    }

    /// Keys per generation; 0 disables the cache (nothing is kept).
    let capacity: Int
    private let generations = Mutex(Generations())

    init(capacity: Int) {
        self.capacity = max(0, capacity)
    }

    subscript(key: Key) -> Value? {
        guard capacity > 0 else { return nil }
        return generations.withLock { g -> Value? in
            if let value = g.young[key] { return value }
            guard let value = g.old.removeValue(forKey: key) else { return nil }
            Self.insert(value, for: key, into: &g, capacity: capacity)
            return value
        }
    }

    func store(_ value: Value, for key: Key) {
        guard capacity > 0 else { return }
        generations.withLock { g in
            g.old.removeValue(forKey: key)
            Self.insert(value, for: key, into: &g, capacity: capacity)
        }
    }

    func remove(_ key: Key) {
        generations.withLock { g in
            g.young.removeValue(forKey: key)
            g.old.removeValue(forKey: key)
        }
    }

    /// Keys held (both generations).
    var count: Int { generations.withLock { $0.young.count + $0.old.count } }

    private static func insert(_ value: Value, for key: Key, into g: inout Generations, capacity: Int) {
        if g.young[key] == nil && g.young.count >= capacity {
            g.old = g.young
            g.young = [:]
        }
        g.young[key] = value
    }
}
