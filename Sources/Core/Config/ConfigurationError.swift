/// Why the configuration was refused: every problem found, each naming its key, so an
/// operator fixes them all in one pass.
struct ConfigurationError: Error, Sendable, CustomStringConvertible {
    let problems: [String]

    init(problems: [String]) { self.problems = problems }
    init(_ problem: String) { self.problems = [problem] }

    var description: String {
        "invalid configuration:\n" + problems.map { "  - \($0)" }.joined(separator: "\n")
    }
}
