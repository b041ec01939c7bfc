/// A delivery whose body can never be applied (wrong shape or types; 400), or a field too
/// large for anything it could hold (413), with `message`, which names the offending field
/// and never echoes its value.
struct PayloadError: Error, Sendable, Equatable, CustomStringConvertible {
    let field: String
    let message: String
    /// A field longer than any valid value (answered 413 `payload_too_large`).
    let isTooLarge: Bool

    init(_ field: String, _ message: String, tooLarge: Bool = false) {
        self.field = field
        self.message = message
        self.isTooLarge = tooLarge
    }

    var description: String { field.isEmpty ? message : "\(field): \(message)" }
}

/// Typed reads of provider payload fields with precise errors.
struct PayloadReader {
    let object: JSONObject
    let path: String

    init(_ value: JSON, path: String) throws(PayloadError) {
        guard case .object(let object) = value else { throw PayloadError(path, "expected an object") }
        self.object = object
        self.path = path
    }

    private func name(_ key: String) -> String { path.isEmpty ? key : "\(path).\(key)" }

    /// A present, non-null value (nil for absent or null).
    func value(_ key: String) -> JSON? {
        guard let v = object[key], !v.isNull else { return nil }
        return v
    }

    func requiredString(_ key: String, maxLength: Int = 191) throws(PayloadError) -> String {
        guard let s = try string(key, maxLength: maxLength), !s.isEmpty else {
            throw PayloadError(name(key), "required non-empty string")
        }
        return s
    }

    func string(_ key: String, maxLength: Int = 191) throws(PayloadError) -> String? {
        guard let v = value(key) else { return nil }
        guard let s = v.stringValue else { throw PayloadError(name(key), "expected a string, got \(v.typeName)") }
        guard s.utf8.count <= maxLength else { throw PayloadError(name(key), "longer than \(maxLength) bytes") }
        return s
    }

    func milliseconds(_ key: String) throws(PayloadError) -> Timestamp? {
        guard let v = value(key) else { return nil }
        guard let ms = v.int64Value, ms >= 0, ms < 32_503_680_000_000 else {
            throw PayloadError(name(key), "expected integer milliseconds since the epoch")
        }
        return Timestamp(millisecondsSinceEpoch: ms)
    }

    func number(_ key: String) throws(PayloadError) -> Double? {
        guard let v = value(key) else { return nil }
        guard let d = v.doubleValue, d.isFinite, abs(d) < 1e12 else { throw PayloadError(name(key), "expected a number") }
        return d
    }

    func bool(_ key: String) throws(PayloadError) -> Bool? {
        guard let v = value(key) else { return nil }
        guard let b = v.boolValue else { throw PayloadError(name(key), "expected a boolean") }
        return b
    }

    func stringArray(_ key: String, maxCount: Int = 100) throws(PayloadError) -> [String] {
        guard let v = value(key) else { return [] }
        guard let array = v.arrayValue, array.count <= maxCount else {
            throw PayloadError(name(key), "expected an array of at most \(maxCount) strings")
        }
        var result: [String] = []
        for element in array {
            guard let s = element.stringValue, s.utf8.count <= 512 else {
                throw PayloadError(name(key), "expected an array of strings")
            }
            result.append(s)
        }
        return result
    }
}
