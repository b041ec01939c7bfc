/// Names a client or an operator chooses (paywall placements and event ids, offering and
/// product ids): 1 to `maxLength` of letters, digits and `. _ : -`, so they are safe in logs,
/// keys and URLs. One rule for the paywall events and the offerings contract that names them.
enum ClientToken {
    static func isValid(_ text: String, maxLength: Int) -> Bool {
        guard !text.isEmpty, text.utf8.count <= maxLength else { return false }
        return text.utf8.allSatisfy { c in
            (c >= 48 && c <= 57) || (c >= 65 && c <= 90) || (c >= 97 && c <= 122) || c == 46 || c == 95 || c == 58 || c == 45
        }
    }
}
