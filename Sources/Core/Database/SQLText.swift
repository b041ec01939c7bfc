import Glibc

/// The text of a SQL statement as UTF-8 bytes: what `SQLQuery` builds and what the statement
/// cache is keyed by, so that running a cached statement costs one pass over its bytes.
///
/// Every run of a statement builds its text again (string interpolation has no other way) and
/// looks it up in the connection's cache, so both are on every query's path: a piece is a
/// `memcpy` (no grapheme or capacity checks of `String.append`) and the hash reads eight
/// bytes at a time (not a SipHash of the text); the text is only decoded to a `String` to
/// prepare it (a cache miss) or to describe an error.
struct SQLText: Sendable, Hashable {
    private(set) var bytes: [UInt8]

    init() { bytes = [] }

    init(_ string: String) { bytes = Array(string.utf8) }

    mutating func reserveCapacity(_ count: Int) { bytes.reserveCapacity(count) }

    mutating func append(_ string: String) {
        // Literals (immortal, contiguous UTF-8) take the copy; any other string is copied
        // through its UTF-8 view.
        if string.utf8.withContiguousStorageIfAvailable({ bytes.append(contentsOf: $0) }) == nil {
            bytes.append(contentsOf: string.utf8)
        }
    }

    mutating func append(_ other: SQLText) { bytes.append(contentsOf: other.bytes) }

    /// One ASCII character, such as a placeholder's `?`.
    mutating func append(ascii byte: UInt8) { bytes.append(byte) }

    /// The text as a `String` (decoded anew on each call: for preparing and for errors).
    var string: String { String(decoding: bytes, as: UTF8.self) }

    static func == (lhs: SQLText, rhs: SQLText) -> Bool {
        guard lhs.bytes.count == rhs.bytes.count else { return false }
        return lhs.bytes.withUnsafeBytes { left in
            rhs.bytes.withUnsafeBytes { right in
                left.count == 0 || memcmp(left.baseAddress!, right.baseAddress!, left.count) == 0
            }
        }
    }

    /// A multiply-xorshift mix of the text's 64-bit words (and its length), fed to `hasher`
    /// once. Not a defence against chosen collisions, which it need not be: the texts are the
    /// code's own statements (values are `?` placeholders, never part of the text).
    func hash(into hasher: inout Hasher) {
        var state = UInt64(truncatingIfNeeded: bytes.count) &* 0x9E37_79B9_7F4A_7C15
        bytes.withUnsafeBytes { raw in
            var offset = 0
            while offset + 8 <= raw.count {
                state = Self.mix(state, raw.loadUnaligned(fromByteOffset: offset, as: UInt64.self))
                offset += 8
            }
            if offset < raw.count {
                var tail: UInt64 = 0
                for index in offset..<raw.count { tail = tail << 8 | UInt64(raw[index]) }
                state = Self.mix(state, tail)
            }
        }
        hasher.combine(state)
    }

    private static func mix(_ state: UInt64, _ word: UInt64) -> UInt64 {
        var x = (state ^ word) &* 0xBF58_476D_1CE4_E5B9
        x ^= x >> 31
        return x
    }
}
