import Glibc

/// One client connection of `RPCSocketServer`, run on its own thread: reads lines, hands
/// each to the protocol, writes the reply line. The buffer never holds more than one
/// line over the limit plus one read chunk.
struct RPCSocketConnection<Context: RPCContextProtocol> {
    let fd: Int32
    let wakeFD: Int32
    let rpc: JSONRPCServerProtocol<Context>
    let context: Context
    let peer: RPCPeer?
    let configuration: RPCSocketServerConfiguration
    let isStopping: () -> Bool
    let logger: Logger

    private static var newline: UInt8 { UInt8(ascii: "\n") }
    private static var chunkSize: Int { 64 * 1024 }

    func run() {
        let maxLine = rpc.limits.maxMessageBytes
        let idleMilliseconds = Int64(configuration.idleTimeoutSeconds * 1000)
        let readMilliseconds = Int64(configuration.readTimeoutSeconds * 1000)
        var pending: [UInt8] = []
        var scanned = 0
        var lastActivity = monotonicMilliseconds()
        var partialLineSince = lastActivity
        var chunk = [UInt8](repeating: 0, count: Self.chunkSize)

        while !isStopping() {
            let deadline = pending.isEmpty ? lastActivity + idleMilliseconds : partialLineSince + readMilliseconds
            let wait = max(0, deadline - monotonicMilliseconds())
            var fds = [
                pollfd(fd: fd, events: Int16(POLLIN), revents: 0),
                pollfd(fd: wakeFD, events: Int16(POLLIN), revents: 0),
            ]
            let ready = poll(&fds, 2, Int32(clamping: wait))
            if ready < 0 {
                if errno == EINTR { continue }
                return
            }
            // Stopping: whatever is pending is an unfinished line, not a call in flight.
            if fds[1].revents != 0 { return }
            if ready == 0 {
                if !pending.isEmpty {
                    let error = RPCError(
                        code: RPCError.Code.timeout,
                        message: "Timed out waiting for the end of the line after \(configuration.readTimeoutSeconds) seconds")
                    send(JSONRPCServerProtocol<Context>.errorResponse(error, id: .null))
                    logger.log(.warning, "rpc.connection.readTimeout", fields: Self.peerFields(peer))
                }
                return
            }
            let count = chunk.withUnsafeMutableBytes { read(fd, $0.baseAddress, $0.count) }
            if count < 0 {
                if errno == EINTR || errno == EAGAIN { continue }
                return
            }
            if count == 0 {
                // End of input: a last message without its newline (`printf ... | nc -U`) still counts.
                if !Self.isBlank(pending[...]) {
                    if pending.count > maxLine { tooLarge() } else { _ = respond(to: pending[...]) }
                }
                return
            }
            if pending.isEmpty { partialLineSince = monotonicMilliseconds() }
            pending.append(contentsOf: chunk[0..<count])

            var lineStart = 0
            while let end = pending[scanned...].firstIndex(of: Self.newline) {
                var line = pending[lineStart..<end]
                if line.last == UInt8(ascii: "\r") { line = line.dropLast() }
                guard line.count <= maxLine else {
                    tooLarge()
                    return
                }
                lineStart = end + 1
                scanned = lineStart
                if !Self.isBlank(line) {
                    guard respond(to: line) else { return }
                }
                lastActivity = monotonicMilliseconds()
                partialLineSince = lastActivity
                // The call in flight is done; a stopping server takes no further ones.
                if isStopping() { return }
            }
            pending.removeFirst(lineStart)
            scanned = pending.count
            if pending.count > maxLine {
                tooLarge()
                return
            }
        }
    }

    /// Handles one message and writes its reply line; false when the client is gone.
    private func respond(to line: ArraySlice<UInt8>) -> Bool {
        guard let reply = rpc.handle(message: Array(line), context: context) else { return true }
        return Self.writeAll(fd, reply + [Self.newline])
    }

    private func send(_ reply: JSON) {
        _ = Self.writeAll(fd, reply.serialized() + [Self.newline])
    }

    private func tooLarge() {
        send(rpc.tooLargeReply())
        logger.log(
            .warning, "rpc.connection.lineTooLong",
            fields: Self.peerFields(peer).merging(["rpc.maxMessageBytes": .int(Int64(rpc.limits.maxMessageBytes))]))
    }

    private static func isBlank(_ bytes: ArraySlice<UInt8>) -> Bool {
        bytes.allSatisfy { $0 == 0x20 || $0 == 0x09 || $0 == 0x0D || $0 == 0x0A }
    }

    /// Writes everything or gives up (peer gone, or `SO_SNDTIMEO` expired). MSG_NOSIGNAL:
    /// a closed peer must not raise SIGPIPE.
    static func writeAll(_ fd: Int32, _ bytes: [UInt8]) -> Bool {
        var offset = 0
        while offset < bytes.count {
            let written = bytes.withUnsafeBytes { raw in
                Glibc.send(fd, raw.baseAddress! + offset, raw.count - offset, Int32(MSG_NOSIGNAL))
            }
            if written < 0 {
                if errno == EINTR { continue }
                return false
            }
            offset += written
        }
        return true
    }

    static func peerFields(_ peer: RPCPeer?) -> JSONObject {
        guard let peer else { return [:] }
        return ["connection.peerPid": .int(Int64(peer.pid)), "connection.peerUid": .int(Int64(peer.uid))]
    }
}

extension JSONObject {
    func merging(_ other: JSONObject) -> JSONObject {
        var result = self
        for (key, value) in other { result[key] = value }
        return result
    }
}
