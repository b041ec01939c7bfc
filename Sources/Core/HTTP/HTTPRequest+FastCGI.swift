extension HTTPRequest {
    /// Builds a request from FastCGI params (already copied out of libfcgi) and the body
    /// read from FCGI_STDIN. Pure, so the conversion is unit-tested without a socket.
    ///
    /// - `REQUEST_METHOD` (default GET); path from `REQUEST_URI` up to `?`, else
    ///   `DOCUMENT_URI`, else `SCRIPT_NAME` + `PATH_INFO`; query from `QUERY_STRING`, else
    ///   the part of `REQUEST_URI` after `?`.
    /// - Headers from `HTTP_*` params (`HTTP_X_REQUEST_ID` → `x-request-id`) plus
    ///   `CONTENT_TYPE` and `CONTENT_LENGTH` when non-empty.
    init(fastCGIParams params: [String: String], body: [UInt8], id: String) {
        self.init(fastCGIParams: FastCGIParams(params), body: body, id: id)
    }

    /// The same from the params in the order the web server sent them: headers keep that
    /// order (nginx: the request's).
    init(fastCGIParams params: FastCGIParams, body: [UInt8], id: String) {
        let requestURI = params["REQUEST_URI"] ?? ""
        let uriPath: Substring
        let uriQuery: Substring
        // `?` searched among the bytes (ASCII: a character boundary), not the Characters.
        if let question = requestURI.utf8.firstIndex(of: UInt8(ascii: "?")) {
            uriPath = requestURI[..<question]
            uriQuery = requestURI[requestURI.utf8.index(after: question)...]
        } else {
            uriPath = requestURI[...]
            uriQuery = ""
        }
        let path: String
        if !uriPath.isEmpty {
            path = String(uriPath)
        } else if let document = params["DOCUMENT_URI"], !document.isEmpty {
            path = document
        } else {
            let joined = (params["SCRIPT_NAME"] ?? "") + (params["PATH_INFO"] ?? "")
            path = joined.isEmpty ? "/" : joined
        }
        let query = params["QUERY_STRING"].flatMap { $0.isEmpty ? nil : $0 } ?? String(uriQuery)

        var headers = HTTPHeaders()
        let http = "HTTP_".utf8
        for (name, value) in params {
            if name.utf8.count > 5, name.utf8.starts(with: http) {
                headers.add(name: HTTPRequest.headerName(fromParam: name.dropFirst(5)), value: value)
            } else if name == "CONTENT_TYPE" || name == "CONTENT_LENGTH", !value.isEmpty {
                headers.add(name: HTTPRequest.headerName(fromParam: name[...]), value: value)
            }
        }
        self.init(
            method: HTTPMethod(params["REQUEST_METHOD"].flatMap { $0.isEmpty ? nil : $0 } ?? "GET"),
            path: path, queryString: query, headers: headers, body: body,
            remoteAddress: params["REMOTE_ADDR"] ?? "", id: id)
    }

    /// `X_REQUEST_ID` → `x-request-id`. CGI folded `-` into `_`, so the original spelling
    /// is lost; lookups are case-insensitive anyway.
    static func headerName(fromParam param: Substring) -> String {
        // Byte by byte: CGI names are ASCII, and every header of every request passes here
        // (no Unicode lower-casing or Character map).
        String(unsafeUninitializedCapacity: param.utf8.count) { buffer in
            var count = 0
            for byte in param.utf8 {
                buffer[count] = byte == 0x5F ? 0x2D : byte.asciiLowercased
                count += 1
            }
            return count
        }
    }
}
