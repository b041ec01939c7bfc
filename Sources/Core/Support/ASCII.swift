extension UInt8 {
    /// The byte with ASCII `A`–`Z` folded to `a`–`z`; every other byte unchanged (protocol
    /// tokens — header names, media types, product-id words — compare ASCII-case-insensitively).
    var asciiLowercased: UInt8 { self >= 0x41 && self <= 0x5A ? self | 0x20 : self }
}

extension String {
    /// The longest prefix of at most `maxBytes` UTF-8 bytes that ends on a character
    /// boundary: what fits a `VARCHAR(n)` column of bytes-bounded ids.
    func utf8Prefix(_ maxBytes: Int) -> String {
        guard utf8.count > maxBytes else { return self }
        var result = ""
        var used = 0
        for character in self {
            let size = character.utf8.count
            guard used + size <= maxBytes else { break }
            result.append(character)
            used += size
        }
        return result
    }
}
