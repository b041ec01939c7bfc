/// Serializes a response as a FastCGI (CGI-style) response: `Status:` line, headers,
/// blank line, body. Pure, so the wire format is unit-tested.
enum FastCGIResponseEncoder {
    /// `Content-Length` is always computed from the body (a handler's own value is
    /// dropped); CR, LF and NUL are removed from header names and values so no handler can
    /// split the header block. Written straight into one byte buffer (the response of every
    /// request passes here).
    static func encode(_ response: HTTPResponse, requestID: String?) -> [UInt8] {
        var bytes: [UInt8] = []
        bytes.reserveCapacity(160 + response.body.count)
        func put(_ text: StaticString) {
            bytes.append(contentsOf: UnsafeBufferPointer(start: text.utf8Start, count: text.utf8CodeUnitCount))
        }
        func putNumber(_ value: Int) { bytes.append(contentsOf: String(value).utf8) }
        func putClean(_ text: String) {
            for byte in text.utf8 where byte != 13 && byte != 10 && byte != 0 { bytes.append(byte) }
        }
        put("Status: ")
        putNumber(response.status.code)
        put(" ")
        putClean(response.status.reasonPhrase)
        put("\r\n")
        var hasContentType = false
        for (name, value) in response.headers {
            if HTTPHeaders.sameName(name, "Content-Length") || HTTPHeaders.sameName(name, "Status") { continue }
            if requestID != nil, HTTPHeaders.sameName(name, "X-Request-Id") { continue }
            if HTTPHeaders.sameName(name, "Content-Type") { hasContentType = true }
            putClean(name)
            put(": ")
            putClean(value)
            put("\r\n")
        }
        if let requestID {
            put("X-Request-Id: ")
            putClean(requestID)
            put("\r\n")
        }
        if !response.body.isEmpty, !hasContentType { put("Content-Type: application/octet-stream\r\n") }
        put("Content-Length: ")
        putNumber(response.body.count)
        put("\r\n\r\n")
        bytes.append(contentsOf: response.body)
        return bytes
    }
}
