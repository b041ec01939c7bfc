/// The one reader of the daemons' command lines (`billing-fcgi`, `billing-rpc` and its
/// `migrate`, `doctor` and `dev-token` commands): options as `--name value` and `--flag`
/// words in any order, read one by one with the command's own `switch`; a value missing,
/// malformed or out of range is a `UsageError` whose message names the option (the caller
/// prints it with its usage and exits 64, EX_USAGE).
struct CommandLineScanner {
    struct UsageError: Error, Equatable, CustomStringConvertible {
        let message: String
        var description: String { message }
    }

    private var remaining: ArraySlice<String>

    init(_ arguments: [String]) {
        remaining = arguments[...]
    }

    /// The next word (an option, or a positional argument), nil at the end.
    mutating func next() -> String? {
        remaining.popFirst()
    }

    /// The value that follows `option`.
    mutating func value(_ option: String) throws(UsageError) -> String {
        guard let value = remaining.popFirst() else { throw UsageError(message: "\(option) needs a value") }
        return value
    }

    /// An integer value within `range`.
    mutating func integer<T: FixedWidthInteger>(_ option: String, in range: ClosedRange<T>) throws(UsageError) -> T {
        let text = try value(option)
        guard let number = T(text), range.contains(number) else {
            throw UsageError(message: "\(option) must be an integer in \(range.lowerBound)...\(range.upperBound), got \(text)")
        }
        return number
    }

    /// A finite number greater than zero.
    mutating func positiveNumber(_ option: String) throws(UsageError) -> Double {
        let text = try value(option)
        guard let number = Double(text), number > 0, number.isFinite else {
            throw UsageError(message: "\(option) must be a positive number, got \(text)")
        }
        return number
    }

    /// The error for a word no option of the command is.
    static func unknown(_ argument: String) -> UsageError {
        UsageError(message: "unknown argument \(argument)")
    }
}
