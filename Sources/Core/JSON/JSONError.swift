/// Why a document could not be parsed. `description` is safe to return to the client that
/// sent the document (it names a position and jansson's reason, never other data).
struct JSONError: Error, Sendable, Equatable, CustomStringConvertible {
    enum Kind: String, Sendable {
        case tooLarge = "too_large"
        case tooDeep = "too_deep"
        case syntax = "syntax"
        case unsupported = "unsupported"
    }

    let kind: Kind
    let message: String
    /// 1-based line and column and 0-based byte position of a syntax error (0 otherwise).
    let line: Int
    let column: Int
    let position: Int

    init(kind: Kind, message: String, line: Int = 0, column: Int = 0, position: Int = 0) {
        self.kind = kind
        self.message = message
        self.line = line
        self.column = column
        self.position = position
    }

    var description: String {
        kind == .syntax ? "invalid JSON at line \(line), column \(column): \(message)" : message
    }
}

/// Bounds applied when parsing untrusted input.
struct JSONLimits: Sendable {
    var maxBytes: Int
    var maxDepth: Int

    init(maxBytes: Int = 1 << 20, maxDepth: Int = 64) {
        self.maxBytes = maxBytes
        self.maxDepth = maxDepth
    }

    static let `default` = JSONLimits()
}
