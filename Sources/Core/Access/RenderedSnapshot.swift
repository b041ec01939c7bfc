/// The text of a user's last access answer, reused while what it says has not changed.
///
/// Dumping the 1–2 KB snapshot is the largest part of `GET /billing/access` once its reads
/// are cached (docs/performance.md). Every answer is still computed in full from a validated read
/// (`AccessRoute`); only building and serializing its document is skipped, and only when
/// the new snapshot answers alike (the same stored state, the user id byte for byte, and the
/// same `AccessSnapshot.Judgments` at its own time) and so differs from the rendered one only in
/// `serverTime`. That is the document's last member and always 24 characters of
/// `[0-9:.TZ-]` (`Timestamp.iso8601`, nothing jansson escapes): those characters are replaced
/// in jansson's text by the new time's. Anything else that differs, down to one balance or
/// an expiry passing, renders the document again, so the cache never answers with
/// something the snapshot does not say.
struct RenderedSnapshot: Sendable {
    /// The snapshot rendered, and its judgments (kept: compared on every reuse).
    let snapshot: AccessSnapshot
    let judgments: AccessSnapshot.Judgments
    /// jansson's text of `snapshot.json`.
    let body: [UInt8]
    /// Where the 24 characters of `serverTime`'s value start in `body`; -1 when the text
    /// does not end with them (never reused then).
    let timeOffset: Int

    /// Renders `snapshot` by jansson.
    init(_ snapshot: AccessSnapshot) {
        let body = snapshot.json.serialized()
        let time = snapshot.serverTime.iso8601
        let suffix = Array("\"serverTime\":\"\(time)\"}".utf8)
        self.snapshot = snapshot
        self.judgments = snapshot.judgments
        self.body = body
        self.timeOffset =
            body.count >= suffix.count && body.suffix(suffix.count).elementsEqual(suffix)
            ? body.count - 2 - time.utf8.count : -1
    }

    /// The text of `next`'s answer if it answers alike: a copy of `body` with the time's
    /// characters replaced; nil otherwise.
    func body(for next: AccessSnapshot) -> [UInt8]? {
        var timeless = next
        timeless.serverTime = snapshot.serverTime
        let time = next.serverTime.iso8601.utf8
        guard timeOffset >= 0, timeOffset + time.count + 2 == body.count, timeless == snapshot,
            snapshot.userId.utf8.elementsEqual(next.userId.utf8), next.judgments == judgments
        else { return nil }
        var copy = body
        copy.replaceSubrange(timeOffset..<(timeOffset + time.count), with: time)
        return copy
    }
}
