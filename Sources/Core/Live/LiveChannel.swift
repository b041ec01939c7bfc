/// What the worker, billing-rpc and nginx agree on for live changes (SPEC §16): the name of
/// a user's nchan channel and the internal locations of the nginx configurations
/// (nginx/nginx.conf.template, deploy/nginx/fcgibilling.conf).
enum LiveChannel {
    /// A user's channel: the SHA-256 of his id in hex, so the internal URIs nginx sees (and
    /// may log) carry no user id, and any id fits a location's pattern.
    static func id(for userId: String) -> String { SHA256.hexHash(Array(userId.utf8)) }

    /// The publisher location (on the publisher socket only) and the two internal
    /// subscriber locations a worker redirects an authorized app to.
    static let publishPath = "/_billing/publish/"
    static let pollPath = "/_billing/changes/poll/"
    static let streamPath = "/_billing/changes/stream/"
    /// nchan's counters (`nchan_stub_status`), on the publisher socket only: the doctor's.
    static let statusPath = "/_billing/status"

    /// How long nchan keeps a channel's messages (`nchan_message_timeout`): an older change
    /// is not published (a waiting app meets it through its revision instead).
    static let keepsSeconds: Int64 = 600

    /// An nchan message id as the publisher answers it and an SSE stream carries it:
    /// `<seconds>:<tag>` (e.g. `1796307148:0`).
    static func isMessageId(_ text: String) -> Bool {
        let parts = text.utf8.split(separator: UInt8(ascii: ":"), omittingEmptySubsequences: false)
        return text.utf8.count <= 64 && parts.count == 2
            && parts.allSatisfy { !$0.isEmpty && $0.allSatisfy { (48...57).contains($0) } }
    }
}

/// nginx's nchan publisher location on `live.publisherSocket`: where billing-rpc publishes a
/// user's changes, and drops an erased user's channel.
struct LivePublisherSocket: Sendable {
    let path: String
    private let client: CurlHTTPClient

    init(path: String) {
        self.path = path
        var client = CurlHTTPClient(timeoutMilliseconds: 5_000, connectTimeoutMilliseconds: 1_000, caFile: nil)
        client.unixSocketPath = path
        client.allowsPlainHTTP = true
        client.maxResponseBytes = 16 << 10
        client.truncatesResponse = true
        client.userAgent = "FCGIBilling-Live"
        self.client = client
    }

    init?(_ live: BillingConfiguration.Live) {
        guard let path = live.publisherSocket else { return nil }
        self.init(path: path)
    }

    private func url(for userId: String) -> String { "http://localhost" + LiveChannel.publishPath + LiveChannel.id(for: userId) }

    /// POSTs `data` (a change, JSON) to `userId`'s channel; answers nchan's message id for it.
    func publish(_ data: [UInt8], to userId: String, session: CurlHTTPClient.Session) throws -> String {
        let response = try client.post(
            url(for: userId), headers: ["Content-Type: application/json", "Accept: text/json"], body: data, session: session)
        // 201: published to waiting subscribers, 202: published, none waiting.
        guard response.status == 201 || response.status == 202 else {
            throw LivePublishError(message: "nchan answered HTTP \(response.status)")
        }
        guard case .object(let info) = try? JSON.parse(response.body), let id = info["last_message_id"]?.stringValue,
            LiveChannel.isMessageId(id)
        else {
            throw LivePublishError(message: "nchan's answer names no message id")
        }
        return id
    }

    /// Deletes `userId`'s channel (its kept changes, and his waiting connections closed):
    /// true when it held a change or a waiting app, false when there was nothing (no
    /// channel, or one already emptied: nchan answers 200 for a while after a deletion).
    func dropChannel(of userId: String) throws -> Bool {
        let response = try client.delete(url(for: userId), headers: ["Accept: text/json"])
        switch response.status {
        case 200:
            guard case .object(let info) = try? JSON.parse(response.body) else { return true }
            return (info["messages"]?.intValue ?? 1) > 0 || (info["subscribers"]?.intValue ?? 1) > 0
        case 404: return false
        default: throw LivePublishError(message: "nchan answered HTTP \(response.status) to the channel's deletion")
        }
    }
}

extension LivePublisherSocket {
    /// What nchan tells of itself: its channels and waiting subscribers, of this nginx host.
    struct Status: Sendable, Equatable {
        var channels: Int
        var subscribers: Int
    }

    func status() throws -> Status {
        let response = try client.get("http://localhost" + LiveChannel.statusPath, headers: [])
        guard response.status == 200 else { throw LivePublishError(message: "nchan's status answered HTTP \(response.status)") }
        guard let status = Self.parseStatus(String(decoding: response.body, as: UTF8.self)) else {
            throw LivePublishError(message: "the status page is not nchan's (no channels and subscribers lines)")
        }
        return status
    }

    /// `nchan_stub_status`'s text: `name: value` lines, `channels: 3` and `subscribers: 7` among them.
    static func parseStatus(_ text: String) -> Status? {
        var values: [Substring: Int] = [:]
        for line in text.split(separator: "\n") {
            let parts = line.split(separator: ":", maxSplits: 1)
            guard parts.count == 2, let value = Int(String(parts[1].filter { $0 != " " && $0 != "\t" })) else { continue }
            values[parts[0]] = value
        }
        guard let channels = values["channels"], let subscribers = values["subscribers"] else { return nil }
        return Status(channels: channels, subscribers: subscribers)
    }
}

struct LivePublishError: Error, CustomStringConvertible {
    var message: String
    var description: String { message }
}
