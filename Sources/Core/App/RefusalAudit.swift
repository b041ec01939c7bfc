import Synchronization

/// Leaves an audit trail of peers the admin socket refused (`admin.allowedUsers`): one
/// `audit_log` row `rpc.refused` per uid at most once a minute, so a flood of attempts
/// cannot flood the table; every refusal is also logged.
final class RefusalAudit: Sendable {
    static let intervalMilliseconds: Int64 = 60_000
    private let lastWritten = Mutex<[UInt32: Int64]>([:])

    func record(_ peer: RPCPeer?, context: AdminRPCContext, logger: Logger) {
        let now = context.clock.now()
        let uid = peer?.uid ?? UInt32.max
        let due = lastWritten.withLock { last -> Bool in
            if let previous = last[uid], now.millisecondsSinceEpoch - previous < Self.intervalMilliseconds { return false }
            if last.count > 10_000 { last.removeAll() }
            last[uid] = now.millisecondsSinceEpoch
            return true
        }
        guard due, let db = context.database else { return }
        do {
            try AuditLog.write(
                actor: "billing-rpc", action: "rpc.refused",
                detail: [
                    "peerPid": peer.map { .int(Int64($0.pid)) } ?? .null,
                    "peerGid": peer.map { .int(Int64($0.gid)) } ?? .null,
                    "reason": "admin.allowedUsers",
                ],
                now: now, on: db)
        } catch {
            logger.warning("refused peer not audited", ["error.kind": .string("\(error)")])
        }
    }
}
