/// Why the configuration was refused: every problem found, each naming its key, so an
/// operator fixes them all in one pass.
public struct ConfigurationError: Error, Sendable, CustomStringConvertible {
    public let problems: [String]

    public init(problems: [String]) { self.problems = problems }
    public init(_ problem: String) { self.problems = [problem] }

    public var description: String {
        "invalid configuration:\n" + problems.map { "  - \($0)" }.joined(separator: "\n")
    }
}
