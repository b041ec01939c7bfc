/// A JWS in compact serialization (`header.payload.signature`, RFC 7515 §7.1), split and
/// decoded but NOT verified: callers verify `signature` over `signingInput` with the key
/// the header selects. Used by ID tokens and (later) App Store signed data.
struct CompactJWS: Sendable {
    let header: JSONObject
    let payload: JSON
    let signature: [UInt8]
    /// ASCII `base64url(header) "." base64url(payload)`, exactly as received.
    let signingInput: [UInt8]

    struct Error: Swift.Error, Sendable, Equatable, CustomStringConvertible {
        let reason: String
        var description: String { reason }
    }

    /// - Parameter maxBytes: tokens longer than this are refused before any decoding.
    static func parse(_ token: some StringProtocol, maxBytes: Int = 16_384) throws(CompactJWS.Error) -> CompactJWS {
        let bytes = Array(token.utf8)
        guard bytes.count <= maxBytes else { throw Error(reason: "token longer than \(maxBytes) bytes") }
        let parts = bytes.split(separator: UInt8(ascii: "."), omittingEmptySubsequences: false)
        guard parts.count == 3 else { throw Error(reason: "expected three dot-separated segments") }
        guard !parts[0].isEmpty, !parts[1].isEmpty, !parts[2].isEmpty else { throw Error(reason: "empty segment") }
        let headerBytes: [UInt8]
        let payloadBytes: [UInt8]
        let signature: [UInt8]
        do {
            headerBytes = try Base64URL.decode(parts[0])
            payloadBytes = try Base64URL.decode(parts[1])
            signature = try Base64URL.decode(parts[2])
        } catch {
            throw Error(reason: "segment is not base64url")
        }
        let limits = JSONLimits(maxBytes: maxBytes, maxDepth: 16)
        guard let header = (try? JSON.parse(headerBytes, limits: limits))?.objectValue else {
            throw Error(reason: "header is not a JSON object")
        }
        guard let payload = try? JSON.parse(payloadBytes, limits: limits), payload.objectValue != nil else {
            throw Error(reason: "payload is not a JSON object")
        }
        return CompactJWS(
            header: header, payload: payload, signature: signature,
            signingInput: Array(bytes[0..<(parts[0].count + 1 + parts[1].count)]))
    }

    /// `alg` of the header, if it is a string.
    var algorithm: String? { header["alg"]?.stringValue }

    /// Signs `payload` with `key` as a compact JWS. `alg` is RS256 or ES256 (the raw `r‖s`
    /// signature JOSE requires). For development tokens, tests, and the one token production
    /// signs: the App Store Server API's (`AppStoreServerAPIToken`, ES256).
    static func sign(payload: JSON, header extra: JSONObject = [:], key: PrivateKey, algorithm: String) throws(CryptoError) -> String {
        var header: JSONObject = ["alg": .string(algorithm), "typ": "JWT"]
        for (name, value) in extra { header[name] = value }
        let input = Base64URL.encode(JSON.object(header).serialized()) + "." + Base64URL.encode(payload.serialized())
        var signature = try key.signSHA256(Array(input.utf8))
        if algorithm.hasPrefix("ES") { signature = try ECDSASignature.rawFromDER(signature) }
        return input + "." + Base64URL.encode(signature)
    }
}
