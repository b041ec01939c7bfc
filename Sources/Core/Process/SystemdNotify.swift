import Glibc

/// systemd's readiness protocol (`sd_notify(3)`), written against the protocol: one
/// datagram of `KEY=VALUE` lines to the Unix socket `$NOTIFY_SOCKET` names (a path, or an
/// abstract address when it starts with `@`). Under `Type=notify` the unit is "started"
/// only once `READY=1` arrives, so `systemctl restart billing-fcgi@2` returns when the new
/// worker accepts. Without `$NOTIFY_SOCKET` (not under systemd) nothing is sent.
enum SystemdNotify {
    /// Sends `state` (e.g. `READY=1\nSTATUS=serving`); false when there is no socket or
    /// the datagram could not be sent (readiness is best effort, never a failure).
    @discardableResult
    static func send(_ state: String) -> Bool {
        guard let raw = getenv("NOTIFY_SOCKET") else { return false }
        var path = Array(String(cString: raw).utf8)
        guard !path.isEmpty, path.first == UInt8(ascii: "/") || path.first == UInt8(ascii: "@") else { return false }
        var address = sockaddr_un()
        address.sun_family = sa_family_t(AF_UNIX)
        let capacity = MemoryLayout.size(ofValue: address.sun_path)
        guard path.count < capacity else { return false }
        if path[0] == UInt8(ascii: "@") { path[0] = 0 }  // abstract namespace
        withUnsafeMutableBytes(of: &address.sun_path) { $0.copyBytes(from: path) }
        let length = socklen_t(MemoryLayout<sa_family_t>.size + path.count + (path[0] == 0 ? 0 : 1))
        let fd = socket(AF_UNIX, Int32(SOCK_DGRAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
        guard fd >= 0 else { return false }
        defer { close(fd) }
        let message = Array(state.utf8)
        let sent = message.withUnsafeBytes { bytes in
            withUnsafePointer(to: &address) {
                $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                    sendto(fd, bytes.baseAddress, bytes.count, Int32(MSG_NOSIGNAL), $0, length)
                }
            }
        }
        return sent == message.count
    }
}
