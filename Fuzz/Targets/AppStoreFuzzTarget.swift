import Glibc

/// `appstore`: the App Store payload decoders, from the webhook body down to the x5c chain.
///
/// The first byte picks the mode; the rest is:
/// - 0: a webhook body (`AppleWebhook.decode`: body JSON, `signedPayload`, outer and nested JWS);
/// - 1: a posted transaction JWS (`AppleDelivery.postedTransaction`);
/// - 2: a notification payload, signed here with the trusted chain (its `data.transactionInfo` /
///   `data.renewalInfo` objects signed and nested as `signedTransactionInfo` / `signedRenewalInfo`),
///   so the decoding of verified data gets fuzzed;
/// - 3: a transaction payload, signed here (`postedTransaction` past verification);
/// - 4: a JWS header signed here over a fixed valid transaction (`alg` and `x5c` handling).
///
/// Trust is the committed fuzz CA (Fuzz/appstore-ca, chain "a" of Tests/harness/appstore.py, valid
/// 2020–2045; the keys are test-only); the seeds (Fuzz/corpus/appstore) are signed with it by
/// `python3 Tests/harness/appstore.py fuzz-seeds Fuzz/appstore-ca Fuzz/corpus/appstore`.
/// Properties: what is accepted fits the inbox's columns and constraints (a violation there is
/// a 500 and a provider retrying forever); what this target signed itself is refused only for
/// what its payload says (never a signature or chain failure while signedDate is in the CA's
/// validity); a header is accepted only with `alg` ES256 and three x5c entries.
extension FuzzTargets {
    static let appleCatalog: AppleDelivery.Catalog = [
        "com.example.plus.monthly": .init(tier: .plus, cadence: .monthly),
        "com.example.pro.monthly": .init(tier: .pro, cadence: .monthly),
    ]
    private static let appleNow = Timestamp(millisecondsSinceEpoch: 1_750_000_000_000)
    /// The CA's validity with a day of margin (certificates check whole seconds).
    private static let appleValidity: ClosedRange<Int64> = 1_577_923_200_000...2_366_755_200_000  // 2020-01-02 ... 2044-12-31

    private static let appleCA: (verifier: AppleSignedDataVerifier, leafKey: PrivateKey, x5c: JSON) = {
        // Fuzz/Targets/<this file> → Fuzz/appstore-ca
        let directory =
            String(#filePath).split(separator: "/", omittingEmptySubsequences: false).dropLast(2)
            .joined(separator: "/") + "/appstore-ca"
        do {
            let root = try FileIO.read("\(directory)/a-root.der")
            let x5c = try ["leaf", "intermediate", "root"].map { (name) throws(FileIO.Error) -> JSON in
                .string(Base64.encode(try FileIO.read("\(directory)/a-\(name).der")))
            }
            let key = try PrivateKey(pem: try FileIO.readString("\(directory)/a-leaf-key.pem"))
            let verifier = AppleSignedDataVerifier(
                rootCertificates: [root], bundleId: "com.example.fcgibilling",
                appAppleId: 1234567, environments: ["Production", "Sandbox"])
            return (verifier, key, .array(x5c))
        } catch {
            fuzzFail("appstore: cannot read the fuzz CA in \(directory): \(error)")
        }
    }()

    static func appStore(_ bytes: [UInt8]) {
        guard let mode = bytes.first else { return }
        let rest = Array(bytes.dropFirst())
        let ca = appleCA
        switch mode % 5 {
        case 0:
            let delivery: AppleDelivery
            do {
                delivery = try AppleWebhook.decode(body: rest, verifier: ca.verifier, catalog: appleCatalog, idPattern: .uuid, now: appleNow)
            } catch {
                return
            }
            checkAppleDelivery(delivery, provider: .appleNotification)
        case 1:
            let text = String(decoding: rest, as: UTF8.self)
            guard
                let delivery = try? AppleDelivery.postedTransaction(
                    text, verifier: ca.verifier, catalog: appleCatalog,
                    idPattern: .uuid, now: appleNow)
            else { return }
            checkAppleDelivery(delivery, provider: .appleTransaction)
        case 2:
            guard case .object(var payload)? = try? JSON.parse(rest, limits: JSONLimits(maxBytes: 1 << 16, maxDepth: 12)) else { return }
            var signedPayloads = [JSON.object(payload)]
            if case .object(var data)? = payload["data"] {
                // Only what this target signed: any JWS of the input is dropped.
                data["signedTransactionInfo"] = nil
                data["signedRenewalInfo"] = nil
                for (plain, signed) in [("transactionInfo", "signedTransactionInfo"), ("renewalInfo", "signedRenewalInfo")] {
                    guard let nested = data[plain], nested.objectValue != nil else { continue }
                    guard let jws = try? appleSign(nested) else { return }
                    data[plain] = nil
                    data[signed] = .string(jws)
                    signedPayloads.append(nested)
                }
                payload["data"] = .object(data)
            }
            guard let jws = try? appleSign(.object(payload)) else { return }
            let body = JSON.object(["signedPayload": .string(jws)]).serialized()
            do {
                let delivery = try AppleWebhook.decode(
                    body: body, verifier: ca.verifier, catalog: appleCatalog, idPattern: .uuid,
                    now: appleNow)
                checkAppleDelivery(delivery, provider: .appleNotification)
            } catch let error as AppleVerificationError {
                checkOwnSignatureRefusal(error, payloads: signedPayloads)
            } catch {
                return
            }
        case 3:
            guard let payload = try? JSON.parse(rest, limits: JSONLimits(maxBytes: 1 << 16, maxDepth: 12)), payload.objectValue != nil,
                let jws = try? appleSign(payload)
            else { return }
            do {
                let delivery = try AppleDelivery.postedTransaction(
                    jws, verifier: ca.verifier, catalog: appleCatalog, idPattern: .uuid,
                    now: appleNow)
                checkAppleDelivery(delivery, provider: .appleTransaction)
            } catch let error as AppleVerificationError {
                // A posted transaction, whatever its members say: no notification to name.
                checkOwnSignatureRefusal(error, payloads: [payload], isNotification: false)
            } catch {
                return
            }
        default:
            guard let header = try? JSON.parse(rest, limits: JSONLimits(maxBytes: 1 << 16, maxDepth: 8)), header.objectValue != nil,
                let jws = try? signRaw(header: header, payload: appleFixedTransaction, key: ca.leafKey, ec: true)
            else { return }
            guard (try? ca.verifier.verifySignedData(jws, now: appleNow)) != nil else { return }
            fuzzCheck(header["alg"]?.stringValue == "ES256", "accepted a header whose alg is not ES256")
            fuzzCheck(header["x5c"]?.arrayValue?.count == 3, "accepted an x5c that is not three certificates")
        }
    }

    private static let appleFixedTransaction: JSON = [
        "transactionId": "2000000002", "originalTransactionId": "2000000001", "bundleId": "com.example.fcgibilling",
        "productId": "com.example.plus.monthly", "purchaseDate": .int(1_749_000_000_000), "expiresDate": .int(1_752_000_000_000),
        "signedDate": .int(1_750_000_000_000), "environment": "Production", "price": 4990, "currency": "EUR",
    ]

    /// ES256 with the trusted chain's leaf, header `{alg, x5c}` as Apple sends it.
    private static func appleSign(_ payload: JSON) throws -> String {
        try signRaw(header: ["alg": "ES256", "x5c": appleCA.x5c], payload: payload, key: appleCA.leafKey, ec: true)
    }

    /// Data this target signed with the trusted chain is refused only for what it says.
    /// `isNotification`: the outer payload was posted as a notification's `signedPayload`.
    private static func checkOwnSignatureRefusal(_ error: AppleVerificationError, payloads: [JSON], isNotification: Bool = true) {
        if isNotification, error.isSettingMismatch, let outer = payloads.first, outer["notificationType"]?.stringValue != nil,
            let uuid = outer["notificationUUID"]?.stringValue
        {
            // One quarantine row per notification (SPEC §19): a mismatch names the notification.
            fuzzCheck(error.notificationUUID == uuid, "a notification's setting mismatch without its notificationUUID")
        }
        switch error.reason {
        case .malformed, .bundleMismatch, .appAppleIdMismatch, .environmentNotAccepted, .notANotification:
            return
        case .untrustedChain:
            // Legitimate only when some signing time falls outside the CA's validity.
            let allValid = payloads.allSatisfy { payload in
                switch payload["signedDate"] ?? payload["receiptCreationDate"] {
                case nil, .null?: return true
                case let value?:
                    guard let ms = value.int64Value else { return false }
                    return appleValidity.contains(ms)
                }
            }
            fuzzCheck(!allValid, "own signature refused as untrusted_chain at a signedDate inside the CA's validity (\(error))")
        default:
            fuzzFail("fuzz property violated: data signed by the trusted chain refused: \(error)")
        }
    }

    /// What an accepted delivery must satisfy before it reaches the inbox.
    private static func checkAppleDelivery(_ delivery: AppleDelivery, provider: EventProvider) {
        let event = delivery.event
        fuzzCheck(event.provider == provider, "wrong provider \(event.provider)")
        checkFitsTheInbox(event, candidates: delivery.userCandidates)
        fuzzCheck(event.tier == nil || event.productId.map { appleCatalog[$0] != nil } == true, "a tier for a product outside the catalog")
        if let t = delivery.transaction {
            // billing_apple_bindings / billing_binding_audit columns.
            fuzzCheck(t.transactionId.utf8.count <= 191 && t.originalTransactionId.utf8.count <= 191, "a transaction id longer than its column")
            fuzzCheck(
                t.effectiveExpiry == nil || t.effectiveExpiry == [t.expiresDate, t.revocationDate].compactMap { $0 }.min(),
                "expiry is not min(expiresDate, revocationDate)")
        }
        let stored = delivery.payload.serialized()
        fuzzCheck((try? JSON.parse(stored, limits: JSONLimits(maxBytes: 1 << 24, maxDepth: 64))) != nil, "stored payload is not valid JSON")
    }
}
