/// Access records and their usage sums, per worker process, so that `GET /billing/access`
/// for a user whose data has not changed costs one primary-key read instead of the full
/// record, plan and usage queries.
///
/// Never trusted blindly: every hit is validated against the user's
/// `billing_access.snapshot_version`, which triggers (migration 009) change in the same
/// transaction as anything the record or the usage holds. A version equal to the cached
/// one therefore proves the cached rows are the committed rows at the moment of that read,
/// whoever wrote them (a worker of another process, the admin daemon, a DBA by hand). What
/// depends on the clock (expiry, grace, overlays starting or ending, quota windows) is
/// judged again at every request; a request whose windows the cached usage does not cover
/// (a window rolled over, a new plan version) reads everything again.
///
/// Bounded (`BoundedCache`): at most 2 × `capacity` users, recently used ones kept.
final class SnapshotCache: Sendable {
    struct Entry: Sendable, Equatable {
        var record: AccessRecord
        /// Units used per (meter, window), read in the same transaction as `record`.
        var usage: [UsageKey: Int64]

        init(record: AccessRecord, windows: [(meter: String, window: QuotaWindow)], used: [String: Int64]) {
            self.record = record
            self.usage = Dictionary(
                windows.map { (UsageKey(meter: $0.meter, window: $0.window), used[$0.meter] ?? 0) },
                uniquingKeysWith: { first, _ in first })
        }

        /// Units used per meter for `windows`; nil when a window is not the one cached.
        func used(in windows: [(meter: String, window: QuotaWindow)]) -> [String: Int64]? {
            var result: [String: Int64] = [:]
            for (meter, window) in windows {
                guard let used = usage[UsageKey(meter: meter, window: window)] else { return nil }
                result[meter] = used
            }
            return result
        }
    }

    struct UsageKey: Hashable, Sendable {
        var meter: String
        var start: Timestamp
        var end: Timestamp

        init(meter: String, window: QuotaWindow) {
            self.meter = meter
            self.start = window.start
            self.end = window.end
        }
    }

    private let entries: BoundedCache<String, Entry>
    private let renderings: BoundedCache<String, RenderedSnapshot>
    private let plans: BoundedCache<String, QuotaResolution.Resolved>

    /// `capacity`: users per generation; 0 disables the cache.
    init(capacity: Int) {
        entries = BoundedCache(capacity: capacity)
        renderings = BoundedCache(capacity: capacity)
        plans = BoundedCache(capacity: capacity)
    }

    /// The quota plan of `snapshot` (`QuotaService.plan(for:plans:)`): the user's last
    /// resolution while it provably still gives the same plan (the same sources, plan
    /// versions and sign-up, and no window rolled over nor version taken effect since),
    /// otherwise a new one, kept for the next request.
    func plan(for snapshot: AccessSnapshot, plans published: [PublishedPlan]) -> QuotaPlan {
        let (resolved, reused) = QuotaService.plan(for: snapshot.quotaSubject, plans: published, reusing: plans[snapshot.userId])
        if !reused { plans.store(resolved, for: snapshot.userId) }
        return resolved.plan
    }

    /// The text of `snapshot`'s answer: the user's last rendering when it says the same
    /// (`RenderedSnapshot`), otherwise a new one, kept for the next answer.
    func body(for snapshot: AccessSnapshot) -> [UInt8] {
        if let last = renderings[snapshot.userId], let body = last.body(for: snapshot) { return body }
        let rendered = RenderedSnapshot(snapshot)
        renderings.store(rendered, for: snapshot.userId)
        return rendered.body
    }

    /// The cached entry for `userId`, if any (not yet validated).
    func entry(for userId: String) -> Entry? { entries[userId] }

    func store(_ entry: Entry) { entries.store(entry, for: entry.record.userId) }
}
