import COpenSSL

/// Standard base64 (RFC 4648 §4, `+/`, padded), e.g. the DER certificates in a JWS `x5c`.
/// Encoding and decoding are OpenSSL's `EVP_EncodeBlock`/`EVP_DecodeBlock`; Swift only checks
/// the alphabet first, because `EVP_DecodeBlock` reads `=` as a zero digit anywhere and
/// reports the padding as decoded bytes.
enum Base64 {
    /// Padded standard base64.
    static func encode(_ bytes: some Collection<UInt8>) -> String {
        Base64Codec.encode(bytes)
    }

    /// Accepts padded or unpadded input in the standard alphabet; rejects whitespace, the
    /// URL-safe alphabet, misplaced `=` and impossible lengths.
    static func decode(_ text: String) throws(CryptoError) -> [UInt8] {
        try Base64Codec.decode(Array(text.utf8), urlSafe: false, operation: "base64 decode")
    }
}

/// base64url without padding (RFC 4648 §5, `-_`), as JOSE (JWS, JWT) uses it. Decoding
/// accepts the canonical form only (RFC 7515 §2, RFC 4648 §3.5): no `=`, and the spare low
/// bits of a last partial quantum zero. So one value has one spelling, and a signed token
/// cannot be re-spelled into a distinct string that still verifies (SPEC §19).
enum Base64URL {
    /// Unpadded base64url.
    static func encode(_ bytes: some Collection<UInt8>) -> String {
        var out = Array(Base64Codec.encode(bytes).utf8)
        while out.last == UInt8(ascii: "=") { out.removeLast() }
        for index in out.indices {
            if out[index] == UInt8(ascii: "+") {
                out[index] = UInt8(ascii: "-")
            } else if out[index] == UInt8(ascii: "/") {
                out[index] = UInt8(ascii: "_")
            }
        }
        return String(decoding: out, as: UTF8.self)
    }

    /// Canonical unpadded base64url only: rejects `=`, non-zero spare bits, `+`, `/`,
    /// whitespace and anything else outside the URL-safe alphabet.
    static func decode(_ text: String) throws(CryptoError) -> [UInt8] {
        try decode(Array(text.utf8))
    }

    static func decode(_ bytes: some Collection<UInt8>) throws(CryptoError) -> [UInt8] {
        let chars = Array(bytes)
        guard chars.last != UInt8(ascii: "=") else { throw CryptoError.invalidEncoding("base64url decode", "padding") }
        let decoded = try Base64Codec.decode(chars, urlSafe: true, operation: "base64url decode")
        // The last character of a partial quantum carries 4 (2 bytes short) or 2 (1 byte
        // short) bits the output does not hold: canonical when they are zero.
        if let last = chars.last, chars.count % 4 != 0 {
            let spare: UInt8 = chars.count % 4 == 2 ? 0x0f : 0x03
            guard let value = Base64Codec.value(last, urlSafe: true), value & spare == 0 else {
                throw CryptoError.invalidEncoding("base64url decode", "non-zero spare bits")
            }
        }
        return decoded
    }
}

enum Base64Codec {
    /// The 6-bit value of one alphabet character.
    static func value(_ c: UInt8, urlSafe: Bool) -> UInt8? {
        switch c {
        case UInt8(ascii: "A")...UInt8(ascii: "Z"): return c - UInt8(ascii: "A")
        case UInt8(ascii: "a")...UInt8(ascii: "z"): return c - UInt8(ascii: "a") + 26
        case UInt8(ascii: "0")...UInt8(ascii: "9"): return c - UInt8(ascii: "0") + 52
        case UInt8(ascii: "-") where urlSafe, UInt8(ascii: "+") where !urlSafe: return 62
        case UInt8(ascii: "_") where urlSafe, UInt8(ascii: "/") where !urlSafe: return 63
        default: return nil
        }
    }

    static func encode(_ bytes: some Collection<UInt8>) -> String {
        guard !bytes.isEmpty else { return "" }
        precondition(bytes.count <= Int(Int32.max) / 4 * 3 - 3, "base64 input too large for EVP_EncodeBlock")
        var out = [UInt8](repeating: 0, count: (bytes.count + 2) / 3 * 4 + 1)
        let written = withContiguousBytes(bytes) { input in
            out.withUnsafeMutableBufferPointer { EVP_EncodeBlock($0.baseAddress, input.baseAddress, Int32(input.count)) }
        }
        return String(decoding: out.prefix(Int(written)), as: UTF8.self)
    }

    static func decode(_ input: [UInt8], urlSafe: Bool, operation: String) throws(CryptoError) -> [UInt8] {
        var chars = input
        var padding = 0
        while chars.last == UInt8(ascii: "=") {
            chars.removeLast()
            padding += 1
        }
        guard padding <= 2 else { throw CryptoError.invalidEncoding(operation, "too much padding") }
        if padding > 0, (chars.count + padding) % 4 != 0 {
            throw CryptoError.invalidEncoding(operation, "padding does not complete a quantum")
        }
        guard chars.count % 4 != 1 else { throw CryptoError.invalidEncoding(operation, "impossible length") }
        for index in chars.indices {
            let c = chars[index]
            switch c {
            case UInt8(ascii: "A")...UInt8(ascii: "Z"), UInt8(ascii: "a")...UInt8(ascii: "z"),
                UInt8(ascii: "0")...UInt8(ascii: "9"):
                continue
            case UInt8(ascii: "-") where urlSafe: chars[index] = UInt8(ascii: "+")
            case UInt8(ascii: "_") where urlSafe: chars[index] = UInt8(ascii: "/")
            case UInt8(ascii: "+") where !urlSafe, UInt8(ascii: "/") where !urlSafe: continue
            default: throw CryptoError.invalidEncoding(operation, "character outside the alphabet")
            }
        }
        guard !chars.isEmpty else { return [] }
        let missing = (4 - chars.count % 4) % 4
        chars.append(contentsOf: repeatElement(UInt8(ascii: "="), count: missing))
        guard chars.count <= Int(Int32.max) else { throw CryptoError.invalidEncoding(operation, "input too large") }
        var out = [UInt8](repeating: 0, count: chars.count / 4 * 3)
        let decoded = chars.withUnsafeBufferPointer { input in
            out.withUnsafeMutableBufferPointer { EVP_DecodeBlock($0.baseAddress, input.baseAddress, Int32(input.count)) }
        }
        guard decoded >= 0, Int(decoded) == out.count else { throw CryptoError.openSSL("EVP_DecodeBlock") }
        // EVP_DecodeBlock counts each `=` as a decoded zero byte.
        out.removeLast(missing)
        return out
    }
}
