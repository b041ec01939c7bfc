/// Why a document could not be parsed. `description` is safe to return to the client that
/// sent the document (it names a position and jansson's reason, never other data).
public struct JSONError: Error, Sendable, Equatable, CustomStringConvertible {
    public enum Kind: String, Sendable {
        case tooLarge = "too_large"
        case tooDeep = "too_deep"
        case syntax = "syntax"
        case unsupported = "unsupported"
    }

    public let kind: Kind
    public let message: String
    /// 1-based line and column and 0-based byte position of a syntax error (0 otherwise).
    public let line: Int
    public let column: Int
    public let position: Int

    public init(kind: Kind, message: String, line: Int = 0, column: Int = 0, position: Int = 0) {
        self.kind = kind
        self.message = message
        self.line = line
        self.column = column
        self.position = position
    }

    public var description: String {
        kind == .syntax ? "invalid JSON at line \(line), column \(column): \(message)" : message
    }
}

/// Bounds applied when parsing untrusted input.
public struct JSONLimits: Sendable {
    public var maxBytes: Int
    public var maxDepth: Int

    public init(maxBytes: Int = 1 << 20, maxDepth: Int = 64) {
        self.maxBytes = maxBytes
        self.maxDepth = maxDepth
    }

    public static let `default` = JSONLimits()
}
