import Foundation

@testable import Core

/// The Apple-shaped test CA scripts/test generates (Tests/harness/appstore.py) in
/// $BILLING_TEST_APPLE_CA_DIR: chain "a" is the trusted one, chain "b" is not.
struct AppleTestCA {
    struct Missing: Error, CustomStringConvertible {
        var description: String { "App Store tests need BILLING_TEST_APPLE_CA_DIR (run them through scripts/test)" }
    }

    let directory: String

    static func load() throws -> AppleTestCA {
        guard let dir = ProcessInfo.processInfo.environment["BILLING_TEST_APPLE_CA_DIR"], !dir.isEmpty else { throw Missing() }
        return AppleTestCA(directory: dir)
    }

    func der(_ name: String) throws -> [UInt8] { try FileIO.read("\(directory)/\(name).der") }
    func key(_ name: String) throws -> PrivateKey { try PrivateKey(pem: try FileIO.readString("\(directory)/\(name)-key.pem")) }

    func x5c(_ chain: String) throws -> [String] {
        try ["leaf", "intermediate", "root"].map { Base64.encode(try der("\(chain)-\($0)")) }
    }

    func sign(_ payload: JSON, chain: String = "a", x5c: [String]? = nil, key: String? = nil, algorithm: String = "ES256") throws -> String {
        let certs = try x5c ?? self.x5c(chain)
        return try CompactJWS.sign(
            payload: payload, header: ["x5c": .array(certs.map { .string($0) })],
            key: try self.key(key ?? "\(chain)-leaf"), algorithm: algorithm)
    }

    func verifier(root: String = "a", environments: [String] = ["Production", "Sandbox"]) throws -> AppleSignedDataVerifier {
        AppleSignedDataVerifier(
            rootCertificates: [try der("\(root)-root")], bundleId: "com.example.fcgibilling",
            appAppleId: 1234567, environments: environments)
    }

    static let catalog: AppleDelivery.Catalog = [
        "com.example.plus.monthly": .init(tier: .plus, cadence: .monthly),
        "com.example.pro.monthly": .init(tier: .pro, cadence: .monthly),
    ]

    static func transaction(
        id: String = "1000", original: String = "1000", product: String = "com.example.plus.monthly",
        signed: Int64 = 1_780_000_000_000, expires: Int64 = 1_782_000_000_000,
        extra: JSONObject = [:]
    ) -> JSON {
        var object: JSONObject = [
            "transactionId": .string(id), "originalTransactionId": .string(original), "bundleId": "com.example.fcgibilling",
            "productId": .string(product), "purchaseDate": .int(signed - 1000), "expiresDate": .int(expires),
            "signedDate": .int(signed), "environment": "Production", "price": 4990, "currency": "EUR",
        ]
        for (k, v) in extra { object[k] = v }
        return .object(object)
    }
}
