import Testing

@testable import Core

/// How long an answer of the ID-token issuer is kept (`auth.keysUrl`): `Cache-Control:
/// max-age` less `Age` (RFC 9111 §4.2.1), as Google and Apple send them.
@Suite struct HTTPFreshnessTests {
    @Test(
        arguments: [
            // Google's securetoken certificates: max-age with other directives, Age spent.
            ("public, max-age=19663, must-revalidate, no-transform", "120", 19_543),
            ("max-age=3600", nil, 3600),
            ("MAX-AGE = 60", nil, 60),
            ("max-age=\"90\"", nil, 90),
            ("private, max-age=0", nil, 0),
            ("max-age=30", "45", 0),  // older than its max-age: stale at once
            ("no-cache, max-age=600", nil, 0),
            ("max-age=600, no-store", nil, 0),
            ("max-age=99999999999", nil, 31_536_000),  // beyond 2^31: "infinity", a year here
            ("max-age=-5", nil, 0),
            ("s-maxage=600", nil, nil),  // for shared caches only
            ("public", nil, nil),
            ("max-age=abc", nil, nil),
            ("max-age=60", "bogus", 60),
        ] as [(String, String?, Int?)])
    func freshness(_ cacheControl: String, _ age: String?, _ expected: Int?) {
        #expect(HTTPClientResponse.freshness(cacheControl: cacheControl, age: age) == expected)
    }

    @Test func noCacheControlHeaderMeansNoMaxAge() {
        #expect(HTTPClientResponse.freshness(cacheControl: nil, age: "10") == nil)
    }
}
