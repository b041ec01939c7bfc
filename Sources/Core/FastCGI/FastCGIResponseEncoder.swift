/// Serializes a response as a FastCGI (CGI-style) response: `Status:` line, headers,
/// blank line, body. Pure, so the wire format is unit-tested.
enum FastCGIResponseEncoder {
    /// `Content-Length` is always computed from the body (a handler's own value is
    /// dropped); CR, LF and NUL are removed from header names and values so no handler can
    /// split the header block.
    static func encode(_ response: HTTPResponse, requestID: String?) -> [UInt8] {
        var head = "Status: \(response.status.code) \(clean(response.status.reasonPhrase))\r\n"
        var headers = response.headers
        headers.remove(name: "Content-Length")
        headers.remove(name: "Status")
        if let requestID { headers["X-Request-Id"] = requestID }
        if !response.body.isEmpty, !headers.contains("Content-Type") {
            headers["Content-Type"] = "application/octet-stream"
        }
        for (name, value) in headers {
            head += "\(clean(name)): \(clean(value))\r\n"
        }
        head += "Content-Length: \(response.body.count)\r\n\r\n"
        var bytes = Array(head.utf8)
        bytes.append(contentsOf: response.body)
        return bytes
    }

    private static func clean(_ text: String) -> String {
        guard text.utf8.contains(where: { $0 == 13 || $0 == 10 || $0 == 0 }) else { return text }
        return String(text.filter { $0 != "\r" && $0 != "\n" && $0 != "\0" && $0 != "\r\n" })
    }
}
