/// billing-rpc's outbound webhooks (SPEC §16), services of the daemon: one fans the outbox
/// out to the endpoints and keeps its retention, and one per endpoint sends that endpoint's
/// deliveries, each on a thread and a database connection of its own, so a dead or slow
/// endpoint holds up no other endpoint and never the write path (which only writes the
/// outbox).
///
/// A dispatcher without endpoints leaves the outbox's queue alone (it keeps the retention):
/// the rows wait, within `retentionDays`, for a billing-rpc configured with endpoints.
///
/// At least once: a delivery is marked only after its answer, so a dispatcher killed
/// between the two sends it again. Per user in outbox (= revision) order: an endpoint sends
/// a user's next delivery only once the earlier one is delivered or has failed for good.
struct WebhookDispatcher: Sendable {
    let configuration: BillingConfiguration.Webhooks
    let client: CurlHTTPClient
    let clock: any BillingClock
    let logger: Logger
    let makeConnection: @Sendable () -> DatabaseConnection

    /// How often the queues are looked at: a change reaches an endpoint within about this
    /// (plus the fan-out's own pass) of its commit.
    static let pollMilliseconds: Int64 = 200
    static let batch = 200

    init(
        configuration: BillingConfiguration.Webhooks, clock: any BillingClock, logger: Logger,
        makeConnection: @escaping @Sendable () -> DatabaseConnection
    ) {
        self.configuration = configuration
        var client = CurlHTTPClient(
            timeoutMilliseconds: configuration.client.timeoutSeconds * 1000,
            connectTimeoutMilliseconds: configuration.client.connectTimeoutSeconds * 1000, caFile: configuration.client.caFile)
        // An endpoint's answer is read for its status only: a long body is cut short, not an error.
        client.maxResponseBytes = 64 << 10
        client.truncatesResponse = true
        client.userAgent = "FCGIBilling-Webhooks"
        self.client = client
        self.clock = clock
        self.logger = logger
        self.makeConnection = makeConnection
    }

    /// The fan-out and retention service, then one sender per endpoint.
    func services() -> [PeriodicService] {
        [outboxService()] + configuration.endpoints.map(senderService)
    }

    private func outboxService() -> PeriodicService {
        PeriodicService(name: "webhook outbox", intervalMilliseconds: Self.pollMilliseconds) { [self] in
            let db = makeConnection()
            var nextPurge: Int64 = 0
            return { isStopping in
                do {
                    while !configuration.endpoints.isEmpty && !isStopping() {
                        let taken = try WebhookDeliveries.fanOut(endpoints: configuration.endpoints, limit: Self.batch, now: clock.now(), on: db)
                        if taken < Self.batch { break }
                    }
                    let now = clock.now()
                    if now.millisecondsSinceEpoch >= nextPurge {
                        nextPurge = now.millisecondsSinceEpoch + 60_000
                        let before = now.adding(seconds: -Int64(configuration.retentionDays) * 86_400)
                        while !isStopping(), try WebhookDeliveries.purge(before: before, batch: 1000, on: db) == 1000 {}
                    }
                } catch {
                    logger.error("webhooks.outbox.failed", ["error.message": .string(String(describing: error))])
                }
            }
        }
    }

    private func senderService(_ endpoint: BillingConfiguration.Webhooks.Endpoint) -> PeriodicService {
        PeriodicService(name: "webhook endpoint \(endpoint.id)", intervalMilliseconds: Self.pollMilliseconds) { [self] in
            let db = makeConnection()
            let session = CurlHTTPClient.Session()
            let signer = WebhookSignature(secret: endpoint.secret)
            return { isStopping in
                guard let signer else { return }
                do {
                    while !isStopping() {
                        let due = try WebhookDeliveries.due(endpointId: endpoint.id, limit: Self.batch, now: clock.now(), on: db)
                        for delivery in due where !isStopping() {
                            let attempt = send(delivery, to: endpoint, signer: signer, session: session)
                            try WebhookDeliveries.record(attempt, of: delivery, now: clock.now(), on: db)
                        }
                        // A user's next change became due as his last one was answered: look again
                        // until nothing is due.
                        if due.isEmpty { break }
                    }
                } catch {
                    logger.error(
                        "webhooks.dispatch.failed", ["webhook.endpoint": .string(endpoint.id), "error.message": .string(String(describing: error))])
                }
            }
        }
    }

    /// One attempt: the body, signed for now, POSTed; what came of it.
    func send(
        _ delivery: WebhookDeliveries.Due, to endpoint: BillingConfiguration.Webhooks.Endpoint, signer: WebhookSignature,
        session: CurlHTTPClient.Session
    ) -> WebhookDeliveries.Attempt {
        let now = clock.now()
        let retryAt = WebhookRetryPolicy.nextAttempt(afterFailures: delivery.attempts + 1, now: now, since: delivery.madeAt)
        let body: [UInt8]
        do {
            body = Self.body(type: delivery.type, changedAt: delivery.changedAt, data: try JSON.parse(delivery.data))
        } catch {
            return .failed(status: nil, error: "outbox row \(delivery.outboxId) holds no JSON", retryAt: nil)
        }
        let id = String(delivery.outboxId)
        let timestamp = now.millisecondsSinceEpoch / 1000
        let signature: String
        do { signature = try signer.signature(id: id, timestamp: timestamp, body: body) } catch {
            return .failed(status: nil, error: "signing failed: \(error)", retryAt: retryAt)
        }
        let headers = [
            "Content-Type: application/json", "webhook-id: \(id)", "webhook-timestamp: \(timestamp)", "webhook-signature: \(signature)",
        ]
        do {
            let response = try client.post(endpoint.url, headers: headers, body: body, session: session)
            if (200..<300).contains(response.status) { return .delivered(status: response.status) }
            logFailure(endpoint, delivery, status: response.status, error: "HTTP \(response.status)", retryAt: retryAt)
            return .failed(status: response.status, error: "HTTP \(response.status)", retryAt: retryAt)
        } catch {
            logFailure(endpoint, delivery, status: nil, error: error.description, retryAt: retryAt)
            return .failed(status: nil, error: error.description, retryAt: retryAt)
        }
    }

    private func logFailure(
        _ endpoint: BillingConfiguration.Webhooks.Endpoint, _ delivery: WebhookDeliveries.Due, status: Int?, error: String,
        retryAt: Timestamp?
    ) {
        logger.warning(
            retryAt == nil ? "webhooks.delivery.failed" : "webhooks.delivery.retrying",
            [
                "webhook.endpoint": .string(endpoint.id), "webhook.id": .int(Int64(delivery.outboxId)),
                "webhook.attempt": .int(Int64(delivery.attempts + 1)), "http.status": JSON(status.map(Int64.init)),
                "error.message": .string(error), "webhook.retry_at": JSON(retryAt?.iso8601),
            ])
    }

    /// `{"type", "timestamp", "data"}`: what every attempt of one outbox row sends.
    static func body(type: String, changedAt: Timestamp, data: JSON) -> [UInt8] {
        JSON.object(["type": .string(type), "timestamp": .string(changedAt.iso8601), "data": data]).serialized()
    }
}

/// When a failed delivery is tried again (SPEC §16): seconds apart at first, so an endpoint
/// back within a minute is served within seconds of its return, then minutes, then hours,
/// until three days after the change; after that the delivery has failed (replayable).
enum WebhookRetryPolicy {
    /// The wait after failure n (1-based); the last repeats.
    static let delaysSeconds: [Int64] = [1, 2, 4, 8, 15, 15, 15, 30, 60, 120, 300, 600, 1200, 1800, 3600, 7200, 14_400, 28_800]
    static let giveUpAfterSeconds: Int64 = 3 * 86_400

    /// When the attempt after `failures` failures is due, or nil when that would be more
    /// than three days after the delivery was made (`madeAt`: the fan-out, or a replay).
    static func nextAttempt(afterFailures failures: Int, now: Timestamp, since madeAt: Timestamp) -> Timestamp? {
        let delay = delaysSeconds[min(max(failures, 1), delaysSeconds.count) - 1]
        let next = now.adding(seconds: delay)
        return next.millisecondsSinceEpoch - madeAt.millisecondsSinceEpoch > giveUpAfterSeconds * 1000 ? nil : next
    }
}
