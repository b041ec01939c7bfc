extension UInt8 {
    /// The byte with ASCII `A`–`Z` folded to `a`–`z`; every other byte unchanged (protocol
    /// tokens — header names, media types, product-id words — compare ASCII-case-insensitively).
    var asciiLowercased: UInt8 { self >= 0x41 && self <= 0x5A ? self | 0x20 : self }
}
