import Testing

@testable import Core

/// Live changes without nginx: what the route accepts and how it tells a stream from a long
/// poll, the channel names the worker and billing-rpc share with nginx's locations, nchan's
/// message ids, and `live.*` configuration. End to end through nchan: Tests/e2e/test_live_changes.py.
@Suite struct LiveChangesTests {
    private func request(_ query: String, accept: String? = nil) -> HTTPRequest {
        var params = ["SCRIPT_NAME": "/api/v1/billing/access/changes", "QUERY_STRING": query, "REQUEST_METHOD": "GET"]
        if let accept { params["HTTP_ACCEPT"] = accept }
        return HTTPRequest(fastCGIParams: params, body: [], id: "r1")
    }

    @Test func afterIsARequiredNonNegativeRevision() throws {
        #expect(try LiveChangesRoute.after(request("after=0")) == 0)
        #expect(try LiveChangesRoute.after(request("after=18446744073709551615")) == UInt64.max)
        for query in ["", "after=", "after=-1", "after=1.5", "after=+1", "after=18446744073709551616", "after=0x10", "after= 1"] {
            #expect(throws: APIError.self, "\(query)") { try LiveChangesRoute.after(request(query)) }
        }
    }

    @Test func aStreamIsAskedForByItsMediaTypeAmongOthers() {
        for accept in ["text/event-stream", "TEXT/Event-Stream", "application/json, text/event-stream;q=0.9", " text/event-stream "] {
            #expect(LiveChangesRoute.wantsStream(accept), "\(accept)")
        }
        for accept in [nil, "", "application/json", "*/*", "text/event-streams", "text/*"] as [String?] {
            #expect(!LiveChangesRoute.wantsStream(accept), "\(accept ?? "nil")")
        }
    }

    @Test func aChannelIsTheHashOfTheUserIdAndFitsTheLocations() {
        let channel = LiveChannel.id(for: "0b0e7d3c-1f52-4a3e-9a41-7f1c1b5d2e10")
        #expect(channel.utf8.count == 64 && channel.utf8.allSatisfy { (48...57).contains($0) || (97...102).contains($0) })
        #expect(LiveChannel.id(for: "a") != LiveChannel.id(for: "b"))
        #expect(LiveChannel.id(for: "user/../x?y") == SHA256.hexHash(Array("user/../x?y".utf8)))
    }

    @Test func nchanMessageIdsAreSecondsAndATag() {
        for id in ["1796307148:0", "1:12"] { #expect(LiveChannel.isMessageId(id), "\(id)") }
        for id in ["", ":", "1796307148", "1796307148:", ":0", "a:0", "1:2:3", "1796307148:[0,1]", "r12", String(repeating: "1", count: 70) + ":0"] {
            #expect(!LiveChannel.isMessageId(id), "\(id)")
        }
    }

    @Test func anAnsweredStreamCarriesTheRevisionAsItsId() {
        let response = LiveChangesRoute.event(["revision": 7, "tier": "pro"], revision: 7)
        #expect(response.headers["Content-Type"] == "text/event-stream")
        let text = String(decoding: response.body, as: UTF8.self)
        #expect(text.hasPrefix("retry: 1000\nid: r7\ndata: {"))
        #expect(text.hasSuffix("}\n\n") && !text.dropLast(2).contains("\n\n"))
    }

    @Test func livePublisherSocketIsAnAbsolutePathOrOff() throws {
        #expect(try BillingConfiguration(json: [:]).live.publisherSocket == nil)
        #expect(try BillingConfiguration(json: ["live": ["publisherSocket": ""]]).live.isEnabled == false)
        #expect(try BillingConfiguration(json: ["live": ["publisherSocket": "/run/x/nchan.sock"]]).live.publisherSocket == "/run/x/nchan.sock")
        for bad: JSON in [["publisherSocket": "run/nchan.sock"], ["publisherSocket": 3], ["socket": "/x"]] {
            #expect(throws: ConfigurationError.self) { try BillingConfiguration(json: ["live": bad]) }
        }
    }

    @Test func nchansStatusPageGivesChannelsAndSubscribers() {
        let page = """
            total published messages: 12
            stored messages: 3
            shared memory used: 16K
            shared memory limit: 131072K
            channels: 4
            subscribers: 400
            redis pending commands: 0

            """
        #expect(LivePublisherSocket.parseStatus(page) == .init(channels: 4, subscribers: 400))
        #expect(LivePublisherSocket.parseStatus("<html>404 Not Found</html>") == nil)
        #expect(LivePublisherSocket.parseStatus("channels: 4\n") == nil)
    }

    @Test func theOutboxIsOnUnlessNothingIsToBeAnnounced() throws {
        #expect(try BillingConfiguration(json: [:]).database.writesOutbox)
        let off = try BillingConfiguration(json: ["outbox": ["enabled": false], "live": ["publisherSocket": ""]])
        #expect(!off.outbox.enabled && !off.database.writesOutbox)
        let endpoint: JSON = ["id": "crm", "url": "https://crm.example/h", "secret": "whsec_AQEBAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQE="]
        #expect(try BillingConfiguration(json: ["webhooks": ["endpoints": [endpoint]]]).outbox.enabled)
        for bad: JSON in [
            ["outbox": ["enabled": "no"]], ["outbox": ["enabled": false], "live": ["publisherSocket": "/run/x/nchan.sock"]],
            ["outbox": ["enabled": false], "webhooks": ["endpoints": [endpoint]]],
        ] {
            let error = #expect(throws: ConfigurationError.self) { try BillingConfiguration(json: bad) }
            #expect(error?.problems.contains { $0.hasPrefix("outbox.enabled: ") } == true, "\(String(describing: error))")
        }
    }
}
