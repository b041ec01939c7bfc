import CCurl

/// What an outgoing HTTPS call answered: its status, body (bounded) and the headers the
/// callers read: `Retry-After` (in seconds when it is a number), and how long the answer
/// stays fresh (`Cache-Control: max-age` less `Age`, RFC 9111 §4.2.1).
struct HTTPClientResponse: Sendable, Equatable {
    var status: Int
    var body: [UInt8]
    var retryAfterSeconds: Int?
    /// nil: no `max-age`; 0 also for `no-cache`, `no-store` and an `Age` beyond `max-age`.
    var freshForSeconds: Int? = nil

    /// Freshness from the two header values (RFC 9111: `s-maxage` is for shared caches only).
    static func freshness(cacheControl: String?, age: String?) -> Int? {
        guard let cacheControl else { return nil }
        var maxAge: Int?
        for directive in cacheControl.split(separator: ",") {
            let parts = directive.split(separator: "=", maxSplits: 1).map { String($0).trimmingSpaces.lowercased() }
            switch parts.first {
            case "no-store"?, "no-cache"?: return 0
            case "max-age"? where parts.count == 2:
                let digits =
                    parts[1].hasPrefix("\"") && parts[1].hasSuffix("\"") && parts[1].count >= 2
                    ? String(parts[1].dropFirst().dropLast()) : parts[1]
                // Beyond 2^31 is "infinity" to a cache (RFC 9111 §1.2.2): a year is plenty.
                maxAge = digits.utf8.count > 9 && digits.utf8.allSatisfy({ $0 >= 48 && $0 <= 57 }) ? 31_536_000 : Int(digits).map { max(0, $0) }
            default: continue
            }
        }
        guard let maxAge else { return nil }
        let spent = age.flatMap { Int($0.trimmingSpaces) }.map { max(0, $0) } ?? 0
        return max(0, maxAge - spent)
    }
}

/// A call that got no HTTP answer: it timed out, could not connect, or TLS failed. Never
/// carries the request's headers (they hold a bearer token).
struct HTTPClientError: Error, Sendable, Equatable, CustomStringConvertible {
    var code: Int
    var message: String
    var isTimeout: Bool

    var description: String { "\(message) (curl \(code))" }
}

/// An HTTPS client over libcurl (Debian `libcurl4-openssl-dev`, over the same OpenSSL):
/// one easy handle per call, HTTPS only, no redirects, a total and a connect timeout on
/// every call, `NOSIGNAL` (threads), and optionally a CA file trusted instead of the
/// system's (tests point it at a local fake). Stateless, so threads share one instance.
struct CurlHTTPClient: Sendable {
    var timeoutMilliseconds: Int
    var connectTimeoutMilliseconds: Int
    /// A PEM bundle of the CAs trusted for the server's certificate; nil: the system's.
    var caFile: String?
    /// Bodies beyond this fail the call (a history page is well under 1 MiB).
    var maxResponseBytes = 4 << 20
    /// A body beyond `maxResponseBytes` is cut there instead of failing the call (a webhook
    /// endpoint's answer is read for its status only).
    var truncatesResponse = false
    var userAgent = "FCGIBilling"
    /// Plain HTTP too (the doctor's look at the local nginx); every outgoing call to a
    /// provider stays HTTPS only.
    var allowsPlainHTTP = false
    /// Follow up to 5 redirects (the doctor meeting the site's 301 to HTTPS); calls to
    /// providers never do.
    var followsRedirects = false
    /// Connect to this Unix socket instead of the URL's host (billing-rpc publishing to
    /// nginx's nchan publisher socket); the URL still names the path and Host.
    var unixSocketPath: String?

    init(timeoutMilliseconds: Int, connectTimeoutMilliseconds: Int, caFile: String?) {
        self.timeoutMilliseconds = timeoutMilliseconds
        self.connectTimeoutMilliseconds = connectTimeoutMilliseconds
        self.caFile = caFile
    }

    /// `curl_global_init` once per process, before the first handle (Swift runs a static
    /// initializer exactly once, whichever thread gets there first).
    fileprivate static let initialized: Bool = curl_global_init(Int(CURL_GLOBAL_DEFAULT)) == CURLE_OK

    /// GET `url` with `headers` (`Name: value` lines).
    func get(_ url: String, headers: [String]) throws(HTTPClientError) -> HTTPClientResponse {
        try perform(url, headers: headers, body: nil)
    }

    /// POST `body` to `url` with `headers` (the content type among them); on `session`'s
    /// connections when given (kept alive between the calls of one thread).
    func post(_ url: String, headers: [String], body: [UInt8], session: Session? = nil) throws(HTTPClientError) -> HTTPClientResponse {
        try perform(url, headers: headers, body: body, session: session)
    }

    /// DELETE `url` (billing-rpc dropping an erased user's nchan channel).
    func delete(_ url: String, headers: [String]) throws(HTTPClientError) -> HTTPClientResponse {
        try perform(url, headers: headers, body: nil, method: "DELETE")
    }

    /// A libcurl easy handle one thread keeps across its calls, so that calls to the same
    /// host reuse a connection (and its TLS session) instead of a handshake each:
    /// `curl_easy_reset` before each call clears the options and keeps the connections.
    /// Confined to the thread that made it.
    final class Session {
        fileprivate let handle: UnsafeMutableRawPointer?

        init() { handle = CurlHTTPClient.initialized ? curl_easy_init() : nil }
        deinit { if let handle { curl_easy_cleanup(handle) } }
    }

    /// One call: a POST of `body` when there is one, a GET otherwise, or `method`'s.
    private func perform(_ url: String, headers: [String], body: [UInt8]?, session: Session? = nil, method: String? = nil)
        throws(HTTPClientError)
        -> HTTPClientResponse
    {
        guard Self.initialized, let handle = session.map({ $0.handle }) ?? curl_easy_init() else {
            throw HTTPClientError(code: -1, message: "libcurl could not start", isTimeout: false)
        }
        defer { if session == nil { curl_easy_cleanup(handle) } }
        if session != nil { curl_easy_reset(handle) }
        var list: UnsafeMutablePointer<curl_slist>?
        for header in headers { list = curl_slist_append(list, header) }
        defer { curl_slist_free_all(list) }

        let sink = ResponseSink(limit: maxResponseBytes, truncates: truncatesResponse)
        let context = Unmanaged.passUnretained(sink).toOpaque()
        var ok = true
        ok = ok && ccurl_setopt_string(handle, CURLOPT_URL, url) == CURLE_OK
        ok = ok && ccurl_setopt_string(handle, CURLOPT_PROTOCOLS_STR, allowsPlainHTTP ? "http,https" : "https") == CURLE_OK
        ok = ok && ccurl_setopt_long(handle, CURLOPT_FOLLOWLOCATION, followsRedirects ? 1 : 0) == CURLE_OK
        if followsRedirects { ok = ok && ccurl_setopt_long(handle, CURLOPT_MAXREDIRS, 5) == CURLE_OK }
        ok = ok && ccurl_setopt_long(handle, CURLOPT_NOSIGNAL, 1) == CURLE_OK
        ok = ok && ccurl_setopt_long(handle, CURLOPT_TIMEOUT_MS, timeoutMilliseconds) == CURLE_OK
        ok = ok && ccurl_setopt_long(handle, CURLOPT_CONNECTTIMEOUT_MS, connectTimeoutMilliseconds) == CURLE_OK
        ok = ok && ccurl_setopt_long(handle, CURLOPT_SSL_VERIFYPEER, 1) == CURLE_OK
        ok = ok && ccurl_setopt_long(handle, CURLOPT_SSL_VERIFYHOST, 2) == CURLE_OK
        ok = ok && ccurl_setopt_string(handle, CURLOPT_USERAGENT, userAgent) == CURLE_OK
        ok = ok && ccurl_setopt_slist(handle, CURLOPT_HTTPHEADER, list) == CURLE_OK
        if let caFile { ok = ok && ccurl_setopt_string(handle, CURLOPT_CAINFO, caFile) == CURLE_OK }
        if let unixSocketPath { ok = ok && ccurl_setopt_string(handle, CURLOPT_UNIX_SOCKET_PATH, unixSocketPath) == CURLE_OK }
        if let method { ok = ok && ccurl_setopt_string(handle, CURLOPT_CUSTOMREQUEST, method) == CURLE_OK }
        ok = ok && ccurl_setopt_pointer(handle, CURLOPT_WRITEDATA, context) == CURLE_OK
        ok =
            ok
            && ccurl_setopt_write_function(
                handle, CURLOPT_WRITEFUNCTION,
                { data, size, count, context in
                    guard let data, let context else { return 0 }
                    let sink = Unmanaged<ResponseSink>.fromOpaque(context).takeUnretainedValue()
                    let length = size * count
                    // Returning less than `length` aborts the transfer.
                    guard sink.body.count + length <= sink.limit else { return sink.truncates ? length : 0 }
                    data.withMemoryRebound(to: UInt8.self, capacity: length) {
                        sink.body.append(contentsOf: UnsafeBufferPointer(start: $0, count: length))
                    }
                    return length
                }) == CURLE_OK
        // libcurl reads the body during `curl_easy_perform` (POSTFIELDS does not copy it).
        let payload = body ?? []
        let code = payload.withUnsafeBytes { bytes -> CURLcode in
            if body != nil {
                ok = ok && ccurl_setopt_long(handle, CURLOPT_POSTFIELDSIZE, bytes.count) == CURLE_OK
                ok =
                    ok
                    && ccurl_setopt_pointer(
                        handle, CURLOPT_POSTFIELDS, UnsafeMutableRawPointer(mutating: bytes.baseAddress ?? UnsafeRawPointer(handle))) == CURLE_OK
            }
            guard ok else { return CURLE_FAILED_INIT }
            return curl_easy_perform(handle)
        }
        guard ok else { throw HTTPClientError(code: -1, message: "libcurl refused an option", isTimeout: false) }
        guard code == CURLE_OK else {
            let message = String(cString: curl_easy_strerror(code))
            throw HTTPClientError(code: Int(code.rawValue), message: message, isTimeout: code == CURLE_OPERATION_TIMEDOUT)
        }
        var status = 0
        _ = ccurl_getinfo_long(handle, CURLINFO_RESPONSE_CODE, &status)
        func header(_ name: String) -> String? {
            var header: UnsafeMutablePointer<curl_header>?
            // origin 1 = CURLH_HEADER, request -1 = the last request.
            guard curl_easy_header(handle, name, 0, 1, -1, &header) == CURLHE_OK, let header, let value = header.pointee.value else {
                return nil
            }
            return String(cString: value)
        }
        let retryAfter = header("Retry-After").flatMap { Int($0.trimmingSpaces) }
        return HTTPClientResponse(
            status: status, body: sink.body, retryAfterSeconds: retryAfter.map { max(0, $0) },
            freshForSeconds: HTTPClientResponse.freshness(cacheControl: header("Cache-Control"), age: header("Age")))
    }

    /// The body collected by the write callback (one per call, used on the calling thread only).
    private final class ResponseSink {
        let limit: Int
        let truncates: Bool
        var body: [UInt8] = []
        init(limit: Int, truncates: Bool) {
            self.limit = limit
            self.truncates = truncates
        }
    }
}

private extension String {
    var trimmingSpaces: String {
        String(drop(while: { $0 == " " || $0 == "\t" }).reversed().drop(while: { $0 == " " || $0 == "\t" || $0 == "\r" || $0 == "\n" }).reversed())
    }
}
