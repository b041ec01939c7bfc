import Testing

@testable import Core

/// Regressions found by the hostile-input suite (issue 7): scripts/fuzz and Tests/e2e/test_hostile.py.
/// Each case is an input that once got a 500 (or was accepted) where a precise 4xx was due.
@Suite struct HostileInputRegressionTests {
    let tiers = TierResolver(rules: [("pro", .pro), ("plus", .plus)], products: [:])

    func decode(_ event: JSON) throws(PayloadError) -> RevenueCatDelivery {
        try RevenueCatDelivery.decode(["api_version": "1.0", "event": event], tiers: tiers, idPattern: .uuid)
    }

    /// The inbox CHECKs `currency REGEXP '^[A-Z]{3}$'`: "€" is three UTF-8 bytes and passed the
    /// decoder's 3-byte bound, then failed the constraint (constraint violation → 500, retried forever).
    @Test(arguments: ["€", "E1", "eu", "e u", "12A"])
    func malformedCurrencyIsAPayloadError(currency: String) {
        #expect(throws: PayloadError.self) {
            try decode(["id": "E", "type": "RENEWAL", "currency": .string(currency), "price_in_purchased_currency": 1])
        }
    }

    /// `price_milli IS NULL OR currency IS NOT NULL`: a local price without a currency used to
    /// reach the insert with a NULL currency (constraint violation → 500). It is dropped now.
    @Test func localPriceWithoutCurrencyIsDropped() throws {
        let d = try decode(["id": "E", "type": "RENEWAL", "price_in_purchased_currency": 4.99])
        #expect(d.event.priceMilli == nil && d.event.currency == nil)
        let usd = try decode(["id": "E", "type": "RENEWAL", "price": 4.99])
        #expect(usd.event.priceMilli == 4990 && usd.event.currency == "USD")
        let lower = try decode(["id": "E", "type": "RENEWAL", "price_in_purchased_currency": 1, "currency": "eur"])
        #expect(lower.event.priceMilli == 1000 && lower.event.currency == "EUR")
    }

    /// A JSON body route refused a form or text body only by failing to parse it (or not at
    /// all, when the bytes happened to be JSON): now 415 before parsing.
    @Test func jsonMediaTypes() {
        for accepted in [
            nil, "", "application/json", "Application/JSON", "application/json; charset=utf-8",
            " application/json ;charset=UTF-8", "application/vnd.api+json",
        ] {
            #expect(HTTPRequest.isJSONMediaType(accepted), "\(String(describing: accepted))")
        }
        for refused in [
            "text/plain", "application/x-www-form-urlencoded", "multipart/form-data; boundary=x",
            "application/jsonx", "json", "text/json+x", "application/xml", "application/json-patch",
        ] {
            #expect(!HTTPRequest.isJSONMediaType(refused), "\(refused)")
        }
    }

    @Test func jsonBodyWithAWrongContentTypeIs415() {
        var headers = HTTPHeaders()
        headers.add(name: "Content-Type", value: "text/plain")
        let request = HTTPRequest(method: .post, path: "/x", headers: headers, body: Array("{}".utf8))
        #expect(throws: APIError.unsupportedMediaType("the body must be application/json", code: "unsupported_media_type")) {
            try request.jsonBody()
        }
        #expect(APIError.unsupportedMediaType("x").status.code == 415)
    }

    /// scripts/fuzz (idtoken) crash: a properly signed token whose `exp` is near Int64.max
    /// overflowed `exp + leeway` / `Timestamp(secondsSinceEpoch:)` and trapped the worker.
    @Test(arguments: [Int64.max, Int64.max - 30, 9_223_372_036_854_775, 253_402_300_800, -1, Int64.min])
    func outOfRangeNumericDatesAreMalformed(value: Int64) throws {
        let key = try PrivateKey.generateEC()
        let verifier = IDTokenVerifier(
            keys: TokenKeySet(keys: ["k": try key.publicKey]), issuer: "iss", audience: "aud",
            leewaySeconds: 60)
        let now = Timestamp(secondsSinceEpoch: 1_750_000_000)
        for claim in ["exp", "nbf", "iat"] {
            var claims: JSONObject = ["iss": "iss", "aud": "aud", "sub": "u", "iat": 1_750_000_000, "exp": 1_750_000_600]
            claims[claim] = .int(value)
            let token = try CompactJWS.sign(payload: .object(claims), header: ["kid": "k"], key: key, algorithm: "ES256")
            #expect(throws: AuthError(.malformed), "\(claim) = \(value)") { try verifier.verify(token, now: now) }
        }
        let fine = try CompactJWS.sign(
            payload: ["iss": "iss", "aud": "aud", "sub": "u", "iat": 1_750_000_000, "exp": 253_402_300_799],
            header: ["kid": "k"], key: key, algorithm: "ES256")
        #expect(try verifier.verify(fine, now: now).subject == "u")
    }

    /// test_hostile.py (App Store): a signed payload past the verifier's bound answered 422
    /// `malformed_jws` on the webhook but 400 on the transaction route, and an empty
    /// `signedPayload` went to the verifier (422). Both routes now read their JWS alike: 400
    /// for a missing, empty or non-string field, 413 past `AppleSignedDataVerifier.maxBytes`.
    @Test func appStoreSignedDataFieldIsReadAlikeOnBothRoutes() throws {
        let bound = AppleSignedDataVerifier.maxBytes
        for body: JSON in [[:], ["signedPayload": ""], ["signedPayload": 5], ["signedPayload": .null], ["signedPayload": ["a.b.c"]]] {
            #expect(throws: PayloadError.self, "\(body)") { try AppleSignedDataVerifier.signedData(body, field: "signedPayload") }
        }
        #expect(throws: PayloadError.self) { try AppleSignedDataVerifier.signedData(["x"], field: "signedPayload") }
        let tooLong: JSON = ["signedTransaction": .string(String(repeating: "a", count: bound + 1))]
        do {
            _ = try AppleSignedDataVerifier.signedData(tooLong, field: "signedTransaction")
            Issue.record("a JWS past the bound was accepted")
        } catch let error as PayloadError {
            // A domain error, answered at the edge (App/ErrorMapping.swift) as 413.
            #expect(error.isTooLarge && error.field == "signedTransaction")
            let answered = try #require(error.apiError)
            #expect(answered.status.code == 413 && answered.code == "payload_too_large")
        }
        let atBound = String(repeating: "a", count: bound)
        #expect(try AppleSignedDataVerifier.signedData(["signedPayload": .string(atBound)], field: "signedPayload") == atBound)
    }
}
