/// Bounds applied to every message before any handler runs. The socket server uses
/// `maxMessageBytes` as its line limit too, so nothing larger is ever buffered.
struct RPCLimits: Sendable, Equatable {
    /// Bytes of one message (one line on the socket, without the newline).
    var maxMessageBytes: Int
    /// Requests in one batch; a longer batch is refused as a whole.
    var maxBatchLength: Int
    /// Nesting of arrays and objects, counted from the message's top level.
    var maxDepth: Int

    init(maxMessageBytes: Int = 1 << 20, maxBatchLength: Int = 100, maxDepth: Int = 32) {
        precondition(maxMessageBytes > 0 && maxBatchLength > 0 && maxDepth > 1, "RPC limits must be positive")
        self.maxMessageBytes = maxMessageBytes
        self.maxBatchLength = maxBatchLength
        self.maxDepth = maxDepth
    }

    static let `default` = RPCLimits()
}
