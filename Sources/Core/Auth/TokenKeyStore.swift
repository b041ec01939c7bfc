import Glibc
import Synchronization

/// The token keys in force, reloadable without a restart (SPEC §13): a provider rotating its
/// signing keys publishes a new `kid` before using it, so a token naming a `kid` the process
/// does not know makes it look at `auth.keysFile` again (at most once a second, and only
/// when the file changed). SIGHUP reloads too. A file that no longer parses keeps the keys
/// in force (and is reported by `reload`), so a half-written file never locks users out.
final class TokenKeyStore: Sendable {
    /// The file's identity and version, to tell a change without reading it.
    private struct Stamp: Equatable, Sendable {
        var device: UInt64, inode: UInt64, size: Int64, modifiedSeconds: Int, modifiedNanoseconds: Int
    }

    private struct State: Sendable {
        var keys: TokenKeySet
        var stamp: Stamp?
        /// SHA-256 of the file's content the keys came from.
        var digest: [UInt8] = []
        var lastLookMilliseconds: Int64?
        var generation = 0
    }

    let path: String?
    private let state: Mutex<State>

    /// Fixed keys (tests, and processes without a keys file).
    init(keys: TokenKeySet) {
        path = nil
        state = Mutex(State(keys: keys))
    }

    /// The keys of `path`; a file that cannot be read or parsed is a start-up error.
    init(path: String) throws(ConfigurationError) {
        self.path = path
        let stamp = Self.stamp(path)
        let (keys, digest) = try Self.read(path)
        state = Mutex(State(keys: keys, stamp: stamp, digest: digest))
    }

    var keys: TokenKeySet { state.withLock { $0.keys } }

    /// Bumped on every reload that changed the keys (a verified-token cache is dropped then).
    var generation: Int { state.withLock { $0.generation } }

    /// Re-reads the file when it changed since the last read; at most once per
    /// `minimumIntervalMilliseconds` (an unknown `kid` from a client must not turn into a
    /// file read per request). True when the keys changed.
    func reloadIfChanged(nowMilliseconds: Int64 = monotonicMilliseconds(), minimumIntervalMilliseconds: Int64 = 1000) -> Bool {
        guard let path else { return false }
        let due = state.withLock { s -> Bool in
            if let last = s.lastLookMilliseconds {
                let (elapsed, overflow) = nowMilliseconds.subtractingReportingOverflow(last)
                if !overflow, elapsed >= 0, elapsed < minimumIntervalMilliseconds { return false }
            }
            s.lastLookMilliseconds = nowMilliseconds
            return true
        }
        guard due, let stamp = Self.stamp(path), stamp != state.withLock({ $0.stamp }) else { return false }
        return (try? reload()) ?? false
    }

    /// Reads the file again (SIGHUP). True when the keys changed; throws (keeping the keys in
    /// force) when the file cannot be read or parsed.
    @discardableResult
    func reload() throws(ConfigurationError) -> Bool {
        guard let path else { return false }
        let stamp = Self.stamp(path)
        let (loaded, digest) = try Self.read(path)
        return state.withLock { s -> Bool in
            s.stamp = stamp
            guard digest != s.digest else { return false }
            s.keys = loaded
            s.digest = digest
            s.generation += 1
            return true
        }
    }

    private static func read(_ path: String) throws(ConfigurationError) -> (TokenKeySet, [UInt8]) {
        let bytes: [UInt8]
        do { bytes = try FileIO.read(path, maxBytes: 1 << 20) } catch { throw ConfigurationError("auth.keysFile: \(error)") }
        let document: JSON
        do { document = try JSON.parse(bytes) } catch { throw ConfigurationError("auth.keysFile: \(path): \(error)") }
        do {
            return (try TokenKeySet.parse(document), SHA256.hash(bytes))
        } catch {
            throw ConfigurationError("auth.keysFile: \(path): \(error.problems.joined(separator: "; "))")
        }
    }

    private static func stamp(_ path: String) -> Stamp? {
        var info = stat()
        guard stat(path, &info) == 0 else { return nil }
        return Stamp(device: UInt64(info.st_dev), inode: UInt64(info.st_ino), size: Int64(info.st_size),
                     modifiedSeconds: info.st_mtim.tv_sec, modifiedNanoseconds: info.st_mtim.tv_nsec)
    }
}
