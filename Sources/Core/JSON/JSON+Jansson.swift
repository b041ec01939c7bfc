import CJansson

extension JSON {
    /// Parses `bytes` with jansson. Rejects documents over `limits.maxBytes`, nesting deeper
    /// than `limits.maxDepth`, duplicate object keys, NUL in strings and integers that do
    /// not fit 64 bits, each with a clear `JSONError`. Any top-level value is accepted.
    static func parse(_ bytes: some Collection<UInt8>, limits: JSONLimits = .default) throws(JSONError) -> JSON {
        try parsed(bytes, limits: limits) { root throws(JSONError) in try JSON(jansson: root, depth: 0, maxDepth: limits.maxDepth) }
    }

    /// `parse`, and the compact text of the top-level object's member `key` (nil when the
    /// document is not an object or has no such member), dumped by jansson from the tree
    /// it parsed: the same bytes as `serialized()` of that member, without building a
    /// jansson tree from the Swift value again. The RevenueCat webhook stores its `event`
    /// so: the payload is the largest thing a webhook handles.
    static func parse(
        _ bytes: some Collection<UInt8>, limits: JSONLimits = .default,
        serializingMember key: String
    ) throws(JSONError) -> (value: JSON, member: [UInt8]?) {
        try parsed(bytes, limits: limits) { root throws(JSONError) in
            let value = try JSON(jansson: root, depth: 0, maxDepth: limits.maxDepth)
            var key = key
            let member = key.withUTF8 { buffer in
                buffer.withMemoryRebound(to: CChar.self) { json_object_getn(root, $0.baseAddress, $0.count) }
            }
            return (value, member.map(JSON.serialize(jansson:)))
        }
    }

    /// Runs `body` on the jansson tree of `bytes` (released after), with `parse`'s rules.
    private static func parsed<T>(
        _ bytes: some Collection<UInt8>, limits: JSONLimits,
        _ body: (UnsafeMutablePointer<json_t>) throws(JSONError) -> T
    ) throws(JSONError) -> T {
        guard bytes.count <= limits.maxBytes else {
            throw JSONError(kind: .tooLarge, message: "document exceeds \(limits.maxBytes) bytes")
        }
        var error = json_error_t()
        let flags = JSON_REJECT_DUPLICATES | JSON_DECODE_ANY
        let root: UnsafeMutablePointer<json_t>? =
            bytes.withContiguousStorageIfAvailable { buffer in
                buffer.withMemoryRebound(to: CChar.self) { json_loadb($0.baseAddress, $0.count, Int(flags), &error) }
            }
            ?? Array(bytes).withUnsafeBufferPointer { buffer in
                buffer.withMemoryRebound(to: CChar.self) { json_loadb($0.baseAddress, $0.count, Int(flags), &error) }
            }
        guard let root else {
            let message = withUnsafeBytes(of: &error.text) { raw in
                String(decoding: raw.prefix(while: { $0 != 0 }), as: UTF8.self)
            }
            throw JSONError(
                kind: .syntax, message: message, line: Int(error.line),
                column: Int(error.column), position: Int(error.position))
        }
        defer { cjansson_decref(root) }
        return try body(root)
    }

    /// Parses a Swift string (UTF-8) with the same rules as `parse(_:limits:)`.
    static func parse(_ text: String, limits: JSONLimits = .default) throws(JSONError) -> JSON {
        try parse(Array(text.utf8), limits: limits)
    }

    private init(jansson value: UnsafeMutablePointer<json_t>, depth: Int, maxDepth: Int) throws(JSONError) {
        guard depth <= maxDepth else {
            throw JSONError(kind: .tooDeep, message: "nesting exceeds \(maxDepth) levels")
        }
        switch cjansson_typeof(value) {
        case JSON_NULL: self = .null
        case JSON_TRUE: self = .bool(true)
        case JSON_FALSE: self = .bool(false)
        case JSON_INTEGER: self = .int(Int64(json_integer_value(value)))
        case JSON_REAL: self = .double(json_real_value(value))
        case JSON_STRING:
            self = .string(JSON.swiftString(json_string_value(value), count: json_string_length(value)))
        case JSON_ARRAY:
            let count = json_array_size(value)
            var elements: [JSON] = []
            elements.reserveCapacity(count)
            for index in 0..<count {
                elements.append(try JSON(jansson: json_array_get(value, index)!, depth: depth + 1, maxDepth: maxDepth))
            }
            self = .array(elements)
        case JSON_OBJECT:
            // Keys are distinct (parsed with JSON_REJECT_DUPLICATES): no lookup per member.
            var members: [(key: String, value: JSON)] = []
            members.reserveCapacity(json_object_size(value))
            var iterator = json_object_iter(value)
            while let current = iterator {
                let key = JSON.swiftString(json_object_iter_key(current), count: json_object_iter_key_len(current))
                members.append((key, try JSON(jansson: json_object_iter_value(current)!, depth: depth + 1, maxDepth: maxDepth)))
                iterator = json_object_iter_next(value, current)
            }
            self = .object(JSONObject(distinctMembers: members))
        default:
            throw JSONError(kind: .unsupported, message: "unsupported JSON value")
        }
    }

    private static func swiftString(_ pointer: UnsafePointer<CChar>?, count: Int) -> String {
        guard let pointer else { return "" }
        return pointer.withMemoryRebound(to: UInt8.self, capacity: count) {
            String(decoding: UnsafeBufferPointer(start: $0, count: count), as: UTF8.self)
        }
    }

    // MARK: Serialization

    /// Compact UTF-8 serialization by jansson. Non-finite doubles (which JSON cannot
    /// express) are written as null.
    func serialized() -> [UInt8] {
        let root = makeJansson()
        defer { cjansson_decref(root) }
        return JSON.serialize(jansson: root)
    }

    /// Compact UTF-8 text of a jansson value (the caller keeps its reference).
    static func serialize(jansson root: UnsafeMutablePointer<json_t>) -> [UInt8] {
        let flags = JSON_COMPACT | JSON_ENCODE_ANY | janssonRealPrecision(17)
        // One pass into a buffer that fits most documents (a log line, a snapshot); only a
        // larger one is dumped again at its exact size. (Sizing with json_dumpb first
        // serialized everything twice; a dump callback appended piece by piece.)
        var needed = 0
        let first = [UInt8](unsafeUninitializedCapacity: 4096) { buffer, count in
            needed = json_dumpb(root, UnsafeMutableRawPointer(buffer.baseAddress!).assumingMemoryBound(to: CChar.self), 4096, Int(flags))
            count = needed <= 4096 ? needed : 0
        }
        guard needed > 4096 else { return first }
        return [UInt8](unsafeUninitializedCapacity: needed) { buffer, count in
            count = json_dumpb(root, UnsafeMutableRawPointer(buffer.baseAddress!).assumingMemoryBound(to: CChar.self), needed, Int(flags))
        }
    }

    /// `serialized()` as a String.
    func serializedString() -> String {
        String(decoding: serialized(), as: UTF8.self)
    }

    /// A new jansson value (reference owned by the caller) holding this value.
    func makeJansson() -> UnsafeMutablePointer<json_t> {
        switch self {
        case .null: return json_null()
        case .bool(let v): return cjansson_boolean(v ? 1 : 0)
        case .int(let v): return json_integer(json_int_t(v))
        case .double(let v): return v.isFinite ? json_real(v) : json_null()
        case .string(let v):
            var v = v
            return v.withUTF8 { buffer in
                buffer.withMemoryRebound(to: CChar.self) { json_stringn_nocheck($0.baseAddress, $0.count) }
            }
        case .array(let elements):
            let array = json_array()!
            for element in elements { json_array_append_new(array, element.makeJansson()) }
            return array
        case .object(let object):
            let result = json_object()!
            for (key, value) in object {
                var key = key
                key.withUTF8 { buffer in
                    buffer.withMemoryRebound(to: CChar.self) {
                        _ = json_object_setn_new_nocheck(result, $0.baseAddress, $0.count, value.makeJansson())
                    }
                }
            }
            return result
        }
    }
}

/// jansson's `JSON_REAL_PRECISION(n)`, a macro Swift cannot import.
private func janssonRealPrecision(_ n: Int32) -> Int32 { (n & 0x1F) << 11 }
