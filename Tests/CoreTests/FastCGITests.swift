import Glibc
import Testing

@testable import Core

@Suite struct FastCGIResponseEncoderTests {
    @Test func writesStatusHeadersLengthAndBody() {
        let response = HTTPResponse.json(.ok, ["ok": true])
        let bytes = FastCGIResponseEncoder.encode(response, requestID: "abc")
        #expect(
            String(decoding: bytes, as: UTF8.self)
                == "Status: 200 OK\r\nContent-Type: application/json\r\nX-Request-Id: abc\r\nContent-Length: 11\r\n\r\n{\"ok\":true}")
    }

    @Test func computesLengthAndStripsInjectedLineBreaks() {
        var response = HTTPResponse(
            status: .notFound, headers: ["Content-Length": "999", "X-Evil": "a\r\nSet-Cookie: x=1"],
            body: [1, 2, 3])
        response.headers["Allow"] = "GET"
        let text = String(decoding: FastCGIResponseEncoder.encode(response, requestID: nil), as: UTF8.self)
        #expect(text.hasPrefix("Status: 404 Not Found\r\n"))
        #expect(text.contains("X-Evil: aSet-Cookie: x=1\r\n"))
        #expect(text.contains("Content-Type: application/octet-stream\r\n"))
        #expect(text.contains("Content-Length: 3\r\n\r\n"))
        #expect(!text.contains("999"))
    }

    @Test func emptyBodyHasZeroLengthAndNoType() {
        let text = String(decoding: FastCGIResponseEncoder.encode(HTTPResponse(status: .noContent), requestID: nil), as: UTF8.self)
        #expect(text == "Status: 204 No Content\r\nContent-Length: 0\r\n\r\n")
    }
}

/// The real thing in-process: libfcgi on a Unix socket, two pool threads, and a minimal
/// FastCGI client speaking the wire protocol.
@Suite(.serialized) struct FastCGIPoolTests {
    @Test func servesRequestsAndStopsCleanly() throws {
        let path = "/tmp/billing-fcgi-test-\(getpid()).sock"
        let listener = try FastCGIListener(path: path, backlog: 16, mode: 0o600)
        var info = stat()
        #expect(lstat(path, &info) == 0)
        #expect(info.st_mode & 0o777 == 0o600)
        let pool = FastCGIWorkerPool(
            listener: listener,
            configuration: .init(threads: 2, maxBodyBytes: 8, maxDrainBytes: 1 << 20),
            router: BillingRoutes.makeRouter(), logger: .discarding, requestStop: {},
            makeContext: { index in BillingRequestContext(workerIndex: index) })
        try pool.start()

        let ping = try FastCGITestClient.request(
            path: path,
            params: [
                "REQUEST_METHOD": "GET", "REQUEST_URI": "/api/v1/ping",
                "REQUEST_ID": "req-1",
            ])
        #expect(ping.hasPrefix("Status: 200 OK\r\n"))
        #expect(ping.contains("X-Request-Id: req-1\r\n"))
        #expect(ping.hasSuffix("\r\n\r\n{\"ok\":true}"))

        let tooLarge = try FastCGITestClient.request(
            path: path,
            params: [
                "REQUEST_METHOD": "POST", "REQUEST_URI": "/api/v1/ping",
                "CONTENT_LENGTH": "100",
            ],
            body: [UInt8](repeating: 65, count: 100))
        #expect(tooLarge.hasPrefix("Status: 413 Payload Too Large\r\n"))
        #expect(tooLarge.contains(#"{"error":{"code":"payload_too_large","#))

        let short = try FastCGITestClient.request(
            path: path,
            params: [
                "REQUEST_METHOD": "POST", "REQUEST_URI": "/api/v1/ping",
                "CONTENT_LENGTH": "5",
            ], body: [1, 2])
        #expect(short.hasPrefix("Status: 400 Bad Request\r\n"))
        let long = try FastCGITestClient.request(
            path: path,
            params: [
                "REQUEST_METHOD": "POST", "REQUEST_URI": "/api/v1/ping",
                "CONTENT_LENGTH": "1",
            ], body: [1, 2])
        #expect(long.hasPrefix("Status: 400 Bad Request\r\n"))
        #expect(long.contains("longer than Content-Length"))

        pool.stop()
        pool.join()
        // Counted after `FCGX_Finish_r`, so only final once the threads are joined.
        #expect(pool.requestsServed == 4)
        listener.close()
        #expect(lstat(path, &info) != 0, "socket path removed")
        #expect(!FastCGIListener.someoneListens(at: path))
    }
}

enum FastCGITestClient {
    struct Failure: Error {}

    private static func record(_ type: UInt8, _ content: [UInt8]) -> [UInt8] {
        [1, type, 0, 1, UInt8(content.count >> 8), UInt8(content.count & 0xFF), 0, 0] + content
    }

    static func request(path: String, params: [String: String], body: [UInt8] = []) throws -> String {
        let fd = socket(AF_UNIX, Int32(SOCK_STREAM.rawValue), 0)
        guard fd >= 0 else { throw Failure() }
        defer { close(fd) }
        var address = sockaddr_un()
        address.sun_family = sa_family_t(AF_UNIX)
        withUnsafeMutableBytes(of: &address.sun_path) { $0.copyBytes(from: path.utf8) }
        let connected = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { connect(fd, $0, socklen_t(MemoryLayout<sockaddr_un>.size)) }
        }
        guard connected == 0 else { throw Failure() }
        var encodedParams: [UInt8] = []
        for (name, value) in params {
            encodedParams += [UInt8(name.utf8.count), UInt8(value.utf8.count)] + Array(name.utf8) + Array(value.utf8)
        }
        var out = record(1, [0, 1, 0, 0, 0, 0, 0, 0]) + record(4, encodedParams) + record(4, [])
        if !body.isEmpty { out += record(5, body) }
        out += record(5, [])
        guard out.withUnsafeBytes({ send(fd, $0.baseAddress, $0.count, 0) }) == out.count else { throw Failure() }
        var received: [UInt8] = []
        var buffer = [UInt8](repeating: 0, count: 4096)
        while true {
            let n = buffer.withUnsafeMutableBytes { recv(fd, $0.baseAddress, $0.count, 0) }
            if n <= 0 { break }
            received += buffer[0..<n]
        }
        var stdout: [UInt8] = []
        var index = 0
        while index + 8 <= received.count {
            let length = Int(received[index + 4]) << 8 | Int(received[index + 5])
            let padding = Int(received[index + 6])
            if received[index + 1] == 6 { stdout += received[(index + 8)..<(index + 8 + length)] }
            index += 8 + length + padding
        }
        return String(decoding: stdout, as: UTF8.self)
    }
}
