import Glibc
import Synchronization

/// The token keys in force, taken again without a restart (SPEC §3, §13), from the issuer's
/// URL, a file, or both:
///
/// - `auth.keysUrl`: fetched over HTTPS and kept as long as the answer's `Cache-Control:
///   max-age` says. A background service (`refresher()`) fetches again when four fifths
///   of that time have passed, so the set is renewed before it lapses; a token naming a `kid`
///   the set does not hold fetches at once (at most once per `minRefreshSeconds`: an
///   unknown `kid` from a client must not turn into a fetch per request). A fetch that fails
///   keeps the last good set, however old (no 5xx to the app because the issuer is down),
///   and is retried from `minRefreshSeconds` up, doubling to five minutes. A key the issuer
///   stopped publishing is refused once the set that held it has been replaced.
/// - `auth.keysFile`: re-read when a token names an unknown `kid` and the file changed (at
///   most once a second), and on SIGHUP. With `keysUrl`, it is the set until the first fetch
///   succeeds (an offline start).
///
/// A file or answer that no longer parses keeps the keys in force, so a half-written file or
/// a broken answer never locks users out.
final class TokenKeyStore: Sendable {
    /// How the issuer's URL is fetched and how long an answer is trusted.
    struct Issuer: Sendable {
        var url: String
        var client: CurlHTTPClient
        /// Freshness of an answer without `max-age`.
        var defaultMaxAgeSeconds: Int
        var minRefreshSeconds: Int

        init(url: String, client: CurlHTTPClient, defaultMaxAgeSeconds: Int = 3600, minRefreshSeconds: Int = 5) {
            self.url = url
            self.client = client
            self.defaultMaxAgeSeconds = defaultMaxAgeSeconds
            self.minRefreshSeconds = max(1, minRefreshSeconds)
        }

        init(_ auth: BillingConfiguration.Auth, url: String) {
            let timeout = auth.keysTimeoutSeconds * 1000
            self.init(
                url: url,
                client: CurlHTTPClient(
                    timeoutMilliseconds: timeout, connectTimeoutMilliseconds: min(timeout, 3000),
                    caFile: auth.caFile),
                defaultMaxAgeSeconds: auth.keysDefaultMaxAgeSeconds, minRefreshSeconds: auth.keysMinRefreshSeconds)
        }
    }

    /// A fetch that did not give a usable key set (the answer's body is never kept: only its
    /// status and the parser's verdict).
    struct FetchError: Error, Sendable, Equatable, CustomStringConvertible {
        var description: String
    }

    /// What the issuer side of the store has done: for metrics, the doctor and `system.health`.
    struct IssuerStatus: Sendable, Equatable {
        var keyCount: Int
        /// When the set in force was fetched (or the file read); nil: never.
        var loadedAt: Timestamp?
        /// How long the last good answer said to keep it.
        var maxAgeSeconds: Int?
        var fetches: Int
        var failedFetches: Int
        var consecutiveFailures: Int
        var lastError: String?
        var lastErrorAt: Timestamp?
    }

    private struct State: Sendable {
        var keys: TokenKeySet
        var stamp: FileStamp?
        /// SHA-256 of the content the keys came from (file or answer).
        var digest: [UInt8] = []
        var lastLookMilliseconds: Int64?
        var generation = 0
        var loadedAt: Timestamp?

        // The issuer's URL (monotonic milliseconds).
        var fetching = false
        var fetchedOnce = false
        var lastFetchMilliseconds: Int64?
        var nextFetchMilliseconds: Int64 = .min
        var maxAgeSeconds: Int?
        var fetches = 0
        var failedFetches = 0
        var consecutiveFailures = 0
        var lastError: String?
        var lastErrorAt: Timestamp?
    }

    let path: String?
    let issuer: Issuer?
    private let clock: any BillingClock
    private let logger: Logger?
    private let state: Mutex<State>

    /// Fixed keys (tests, and processes without a keys file).
    init(keys: TokenKeySet) {
        path = nil
        issuer = nil
        clock = SystemClock()
        logger = nil
        state = Mutex(State(keys: keys))
    }

    /// The keys of `path`; a file that cannot be read or parsed is a start-up error.
    convenience init(path: String) throws(ConfigurationError) {
        try self.init(path: path, issuer: nil)
    }

    /// Keys from `issuer`'s URL, seeded by `path` when given (a file that cannot be read is
    /// then a start-up error too). Nothing is fetched here: `refresher()` or the first
    /// token does it, so a process that verifies no token never calls the issuer.
    init(path: String?, issuer: Issuer?, clock: any BillingClock = SystemClock(), logger: Logger? = nil) throws(ConfigurationError) {
        self.path = path
        self.issuer = issuer
        self.clock = clock
        self.logger = logger
        if let path {
            let (keys, digest) = try Self.read(path)
            state = Mutex(State(keys: keys, stamp: FileStamp(path: path), digest: digest, loadedAt: clock.now()))
        } else {
            state = Mutex(State(keys: TokenKeySet(keys: [:])))
        }
    }

    var keys: TokenKeySet { state.withLock { $0.keys } }

    /// Bumped on every reload that changed the keys (a verified-token cache is dropped then).
    var generation: Int { state.withLock { $0.generation } }

    /// The key for `kid`: the set in force, else (a rotation this process has not seen) the
    /// issuer's URL fetched again or the file re-read, each within its bounds.
    func key(for kid: String, nowMilliseconds: Int64 = monotonicMilliseconds()) -> PublicKey? {
        if let key = state.withLock({ $0.keys.keys[kid] }) { return key }
        if let issuer, fetchIfAllowed(nowMilliseconds: nowMilliseconds, minimumIntervalSeconds: issuer.minRefreshSeconds),
            let key = state.withLock({ $0.keys.keys[kid] })
        {
            return key
        }
        return reloadIfChanged(nowMilliseconds: nowMilliseconds) ? state.withLock { $0.keys.keys[kid] } : nil
    }

    /// Re-reads the file when it changed since the last read; at most once per
    /// `minimumIntervalMilliseconds`. True when the keys changed.
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
        guard due, let stamp = FileStamp(path: path), stamp != state.withLock({ $0.stamp }) else { return false }
        return (try? reloadFile()) ?? false
    }

    /// SIGHUP: reads the file again and fetches the issuer's URL (both ignoring their
    /// intervals). True when the keys changed; throws (keeping the keys in force) when the
    /// file cannot be read or parsed, or the fetch failed.
    @discardableResult
    func reload() throws(ConfigurationError) -> Bool {
        var changed = false
        if path != nil, issuer == nil || !state.withLock({ $0.fetchedOnce }) { changed = try reloadFile() }
        if issuer != nil {
            do { changed = try fetch(nowMilliseconds: monotonicMilliseconds()) || changed } catch {
                throw ConfigurationError("auth.keysUrl: \(error)")
            }
        }
        return changed
    }

    private func reloadFile() throws(ConfigurationError) -> Bool {
        guard let path else { return false }
        let stamp = FileStamp(path: path)
        let (loaded, digest) = try Self.read(path)
        let now = clock.now()
        return state.withLock { s -> Bool in
            s.stamp = stamp
            guard digest != s.digest else { return false }
            s.keys = loaded
            s.digest = digest
            s.generation += 1
            s.loadedAt = now
            return true
        }
    }

    // MARK: - The issuer's URL

    /// The background refresher's step: fetches when the set is due (never fetched, four
    /// fifths of its max-age passed, or a failed fetch's backoff over). True when it fetched.
    @discardableResult
    func refreshIfDue(nowMilliseconds: Int64 = monotonicMilliseconds()) -> Bool {
        guard issuer != nil else { return false }
        let due = state.withLock { s in !s.fetching && nowMilliseconds >= s.nextFetchMilliseconds }
        guard due else { return false }
        return fetchIfAllowed(nowMilliseconds: nowMilliseconds, minimumIntervalSeconds: 0)
    }

    /// The service that keeps the issuer's keys fresh (a worker process runs it: it wakes
    /// four times a second and fetches only when due); nil without an issuer's URL.
    func refresher() -> PeriodicService? {
        guard issuer != nil else { return nil }
        return PeriodicService(name: "token key refresher", intervalMilliseconds: 250) { [self] in
            { _ in self.refreshIfDue() }
        }
    }

    /// Fetches unless another thread is fetching (then waits for it, bounded by the
    /// client's timeout) or the last fetch began less than `minimumIntervalSeconds` ago.
    /// True when a fetch (this thread's or the one waited for) completed since the call.
    private func fetchIfAllowed(nowMilliseconds: Int64, minimumIntervalSeconds: Int) -> Bool {
        enum Decision { case fetch, wait, no }
        let decision = state.withLock { s -> Decision in
            if s.fetching { return .wait }
            if let last = s.lastFetchMilliseconds, nowMilliseconds - last < Int64(minimumIntervalSeconds) * 1000 { return .no }
            s.fetching = true
            return .fetch
        }
        switch decision {
        case .no:
            return false
        case .wait:
            let before = state.withLock { $0.fetches }
            let deadline = monotonicMilliseconds() + Int64(issuer?.client.timeoutMilliseconds ?? 0) + 1000
            while state.withLock({ $0.fetching }), monotonicMilliseconds() < deadline { usleep(10_000) }
            return state.withLock { $0.fetches } != before
        case .fetch:
            _ = try? fetch(nowMilliseconds: nowMilliseconds, claimed: true)
            return true
        }
    }

    /// One GET of the issuer's URL; the set replaces the one in force when it parses.
    /// `claimed`: the caller already set `fetching`.
    @discardableResult
    private func fetch(nowMilliseconds: Int64, claimed: Bool = false) throws(FetchError) -> Bool {
        guard let issuer else { return false }
        if !claimed {
            let busy = state.withLock { s -> Bool in
                if s.fetching { return true }
                s.fetching = true
                return false
            }
            if busy { throw FetchError(description: "a fetch is already under way") }
        }
        let downloaded: (keys: TokenKeySet, digest: [UInt8], maxAge: Int)
        do {
            downloaded = try Self.download(issuer)
        } catch {
            let now = clock.now()
            let failures = state.withLock { s -> Int in
                s.fetching = false
                s.lastFetchMilliseconds = nowMilliseconds
                s.fetches += 1
                s.failedFetches += 1
                s.consecutiveFailures += 1
                s.lastError = error.description
                s.lastErrorAt = now
                let backoff = min(300, issuer.minRefreshSeconds << min(s.consecutiveFailures - 1, 16))
                s.nextFetchMilliseconds = nowMilliseconds + Int64(backoff) * 1000
                return s.consecutiveFailures
            }
            logger?.warning(
                "token keys not fetched; the keys in force stay",
                [
                    "auth.keysUrl": .string(issuer.url), "error.message": .string(error.description),
                    "auth.consecutiveFailures": .int(Int64(failures)),
                ])
            throw error
        }
        let (keys, digest, maxAge) = downloaded
        let now = clock.now()
        let (changed, kids) = state.withLock { s -> (Bool, [String]) in
            s.fetching = false
            s.fetchedOnce = true
            s.lastFetchMilliseconds = nowMilliseconds
            s.fetches += 1
            s.consecutiveFailures = 0
            s.maxAgeSeconds = maxAge
            s.loadedAt = now
            // Ahead of expiry: at four fifths of max-age, never sooner than the minimum.
            s.nextFetchMilliseconds = nowMilliseconds + max(Int64(issuer.minRefreshSeconds) * 1000, Int64(maxAge) * 800)
            guard digest != s.digest else { return (false, []) }
            s.keys = keys
            s.digest = digest
            s.generation += 1
            return (true, keys.keys.keys.sorted())
        }
        if changed {
            logger?.info(
                "token keys fetched",
                [
                    "auth.keysUrl": .string(issuer.url), "auth.kids": .string(kids.joined(separator: ",")),
                    "auth.maxAgeSeconds": .int(Int64(maxAge)),
                ])
        }
        return changed
    }

    /// GET and parse: the set, the digest of the answer, and its freshness in seconds.
    static func download(_ issuer: Issuer) throws(FetchError) -> (TokenKeySet, [UInt8], Int) {
        let response: HTTPClientResponse
        do { response = try issuer.client.get(issuer.url, headers: ["Accept: application/json"]) } catch {
            throw FetchError(description: "\(issuer.url): \(error)")
        }
        guard response.status == 200 else { throw FetchError(description: "\(issuer.url) answered HTTP \(response.status)") }
        let document: JSON
        do { document = try JSON.parse(response.body) } catch { throw FetchError(description: "\(issuer.url): not JSON (\(error))") }
        let keys: TokenKeySet
        do { keys = try TokenKeySet.parse(document) } catch {
            throw FetchError(description: "\(issuer.url): \(error.problems.joined(separator: "; "))")
        }
        // A freshness of zero (no-cache) still keeps the set: it is refetched at the minimum interval.
        let maxAge = min(response.freshForSeconds ?? issuer.defaultMaxAgeSeconds, 7 * 86_400)
        return (keys, SHA256.hash(response.body), maxAge)
    }

    var issuerStatus: IssuerStatus {
        state.withLock { s in
            IssuerStatus(
                keyCount: s.keys.keys.count, loadedAt: s.loadedAt, maxAgeSeconds: s.maxAgeSeconds, fetches: s.fetches,
                failedFetches: s.failedFetches, consecutiveFailures: s.consecutiveFailures, lastError: s.lastError,
                lastErrorAt: s.lastErrorAt)
        }
    }

    /// The key set's gauges and counters (`billing_auth_keys*`), for the worker's metrics.
    func samples(now: Timestamp) -> [MetricSample] {
        let status = issuerStatus
        var samples = [MetricSample("billing_auth_keys", [:], Double(status.keyCount))]
        if let loadedAt = status.loadedAt {
            samples.append(
                MetricSample(
                    "billing_auth_keys_age_seconds", [:],
                    Double(max(0, now.millisecondsSinceEpoch - loadedAt.millisecondsSinceEpoch)) / 1000))
        }
        if issuer != nil {
            samples.append(MetricSample("billing_auth_keys_fetches_total", ["outcome": "ok"], Double(status.fetches - status.failedFetches)))
            samples.append(MetricSample("billing_auth_keys_fetches_total", ["outcome": "error"], Double(status.failedFetches)))
            samples.append(MetricSample("billing_auth_keys_consecutive_fetch_errors", [:], Double(status.consecutiveFailures)))
        }
        return samples
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
}
