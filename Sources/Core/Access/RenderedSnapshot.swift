/// The text of a user's last access answer, reused while what it says has not changed.
///
/// jansson's dump of the 1–2 KB snapshot was the largest cost of `GET /billing/access`
/// (docs/performance.md). Every answer is still computed in full from a validated read
/// (`AccessRoute`); only its serialization is reused, and only when the new document is
/// identical to the rendered one member for member but for `serverTime`, which is the last member and
/// always 24 characters of `[0-9:.TZ-]` (`Timestamp.iso8601`, nothing jansson escapes): those
/// characters are replaced in jansson's text by the new time's. Anything else that differs,
/// down to one balance, renders the document again. So the cache can never answer with
/// something the snapshot does not say.
struct RenderedSnapshot: Sendable {
    /// Every member of the answer but `serverTime` (`AccessSnapshot.timelessJSON`).
    let document: JSONObject
    /// jansson's text of `document` followed by `serverTime`.
    let body: [UInt8]
    /// Where the 24 characters of `serverTime`'s value start in `body`.
    let timeOffset: Int

    /// Renders `document` with `serverTime` appended, by jansson.
    init(document: JSONObject, serverTime: String) {
        var full = document
        full["serverTime"] = .string(serverTime)
        let body = JSON.object(full).serialized()
        let suffix = Array("\"serverTime\":\"\(serverTime)\"}".utf8)
        self.document = document
        self.body = body
        // Always the case for jansson's compact dump of an object whose last member this is;
        // -1 (never reused) otherwise.
        self.timeOffset = body.count >= suffix.count && body.suffix(suffix.count).elementsEqual(suffix)
            ? body.count - 2 - serverTime.utf8.count : -1
    }

    /// The body for `document` at `serverTime`, if this rendering says the same: a copy of
    /// `body` with the time's characters replaced; nil when anything else differs.
    func body(for document: JSONObject, serverTime: String) -> [UInt8]? {
        let time = serverTime.utf8
        guard timeOffset >= 0, timeOffset + time.count + 2 == body.count, document.isIdentical(to: self.document) else { return nil }
        var copy = body
        copy.replaceSubrange(timeOffset..<(timeOffset + time.count), with: time)
        return copy
    }
}
