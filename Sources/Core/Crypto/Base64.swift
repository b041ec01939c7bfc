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

/// base64url without padding (RFC 4648 §5, `-_`), as JOSE (JWS, JWT) uses it.
enum Base64URL {
    /// Unpadded base64url.
    static func encode(_ bytes: some Collection<UInt8>) -> String {
        var out = Array(Base64Codec.encode(bytes).utf8)
        while out.last == UInt8(ascii: "=") { out.removeLast() }
        for index in out.indices {
            if out[index] == UInt8(ascii: "+") { out[index] = UInt8(ascii: "-") }
            else if out[index] == UInt8(ascii: "/") { out[index] = UInt8(ascii: "_") }
        }
        return String(decoding: out, as: UTF8.self)
    }

    /// Accepts missing (or correct) padding; rejects `+`, `/`, whitespace and anything else
    /// outside the URL-safe alphabet.
    static func decode(_ text: String) throws(CryptoError) -> [UInt8] {
        try Base64Codec.decode(Array(text.utf8), urlSafe: true, operation: "base64url decode")
    }

    static func decode(_ bytes: some Collection<UInt8>) throws(CryptoError) -> [UInt8] {
        try Base64Codec.decode(Array(bytes), urlSafe: true, operation: "base64url decode")
    }
}

enum Base64Codec {
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
