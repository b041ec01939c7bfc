import Glibc

/// Dotted-quad IPv4 addresses, as libfcgi's `FCGI_WEB_SERVER_ADDRS` lists them.
enum IPv4Address {
    /// Whether `text` is one IPv4 address (`inet_pton`'s rule: four decimal parts).
    static func isValid(_ text: String) -> Bool {
        var address = in_addr()
        return inet_pton(AF_INET, text, &address) == 1
    }
}
