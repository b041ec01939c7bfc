import CFCGI
import Glibc

/// One thread's `FCGX_Request`, reused for every request that thread accepts.
///
/// libfcgi keeps pointers to the struct inside its streams, so it lives at a fixed heap
/// address for the object's lifetime. Used only by the thread that created it.
final class FastCGIRequest {
    private let raw: UnsafeMutablePointer<FCGX_Request>
    /// Where FCGI_STDIN is read, allocated once per thread rather than per request.
    private var chunk = [UInt8](repeating: 0, count: 64 * 1024)

    init(listenDescriptor: Int32) throws(FastCGIError) {
        raw = .allocate(capacity: 1)
        raw.initialize(to: FCGX_Request())
        let status = FCGX_InitRequest(raw, listenDescriptor, 0)
        guard status == 0 else {
            raw.deallocate()
            throw FastCGIError.thread("FCGX_InitRequest failed with \(status)", errno: 0)
        }
    }

    deinit {
        FCGX_Free(raw, 1)
        raw.deinitialize(count: 1)
        raw.deallocate()
    }

    /// Finishes the previous request, then blocks for the next one. 0 on success, a
    /// negative errno (or libfcgi code) when accepting failed or shutdown is pending.
    func accept() -> Int32 {
        FCGX_Accept_r(raw)
    }

    /// Flushes the response and closes the connection (nginx opens one per request).
    ///
    /// libfcgi's close is a lingering one: shut down the sending side, then wait (up to 2 s)
    /// until the web server closes its end, reading whatever it still sends, so that a TCP
    /// peer still sending is not answered with a reset that would discard the response. Once
    /// FCGI_STDIN has been read to its end, nginx sends nothing more on the connection
    /// (`fastcgi_keep_conn off`: it closes it on FCGI_END_REQUEST), so there is nothing to
    /// linger for: the connection is closed at once (`FCGX_Detach` makes libfcgi skip the
    /// shutdown, the poll and the read). That wait held the thread for a round trip through
    /// nginx's event loop on every request (docs/performance.md). A request whose input was
    /// not read to its end (a refused body beyond the drain limit) still lingers.
    func finish() {
        if FCGX_HasSeenEOF(raw.pointee.in) != 0 { _ = FCGX_Detach(raw) }
        FCGX_Finish_r(raw)
    }

    /// All params copied into Swift strings at once: libfcgi reuses their buffers on the
    /// next accept.
    func params() -> FastCGIParams {
        var result: [(name: String, value: String)] = []
        result.reserveCapacity(32)
        guard var entry = raw.pointee.envp else { return FastCGIParams(result) }
        while let cString = entry.pointee {
            // NAME=VALUE, split on the first '=' without an intermediate String.
            let bytes = UnsafeBufferPointer(start: UnsafeRawPointer(cString).assumingMemoryBound(to: UInt8.self), count: strlen(cString))
            if let equals = bytes.firstIndex(of: 0x3D) {
                result.append(
                    (
                        name: String(decoding: UnsafeBufferPointer(rebasing: bytes[..<equals]), as: UTF8.self),
                        value: String(decoding: UnsafeBufferPointer(rebasing: bytes[(equals + 1)...]), as: UTF8.self)
                    ))
            } else {
                result.append((name: String(decoding: bytes, as: UTF8.self), value: ""))
            }
            entry += 1
        }
        return FastCGIParams(result)
    }

    /// Reads up to `limit` bytes of FCGI_STDIN; fewer means end of input was reached.
    func read(upTo limit: Int) -> [UInt8] {
        var body: [UInt8] = []
        while body.count < limit {
            let wanted = min(chunk.count, limit - body.count)
            let got = chunk.withUnsafeMutableBufferPointer { buffer in
                buffer.withMemoryRebound(to: CChar.self) { FCGX_GetStr($0.baseAddress, Int32(wanted), raw.pointee.in) }
            }
            if got <= 0 { break }
            body.append(contentsOf: chunk[0..<Int(got)])
            if got < wanted { break }
        }
        return body
    }

    /// Reads and throws away up to `limit` bytes; true when end of input was reached, so
    /// nginx finished sending and will read our response instead of seeing a reset.
    func discard(upTo limit: Int) -> Bool {
        var remaining = limit
        while remaining > 0 {
            let wanted = min(chunk.count, remaining)
            let got = chunk.withUnsafeMutableBufferPointer { buffer in
                buffer.withMemoryRebound(to: CChar.self) { FCGX_GetStr($0.baseAddress, Int32(wanted), raw.pointee.in) }
            }
            if got < wanted { return true }
            remaining -= Int(got)
        }
        return FCGX_HasSeenEOF(raw.pointee.in) != 0
    }

    /// Writes to FCGI_STDOUT; false when the connection failed (nginx went away).
    @discardableResult
    func write(_ bytes: [UInt8]) -> Bool {
        guard !bytes.isEmpty else { return true }
        let written = bytes.withUnsafeBufferPointer { buffer in
            buffer.withMemoryRebound(to: CChar.self) { FCGX_PutStr($0.baseAddress, Int32(buffer.count), raw.pointee.out) }
        }
        return Int(written) == bytes.count
    }
}
