import Testing

@testable import Core

/// SPEC §19: what a user id may be, and how a stored payload is scrubbed on erasure.
@Suite struct ErasureTests {
    @Test(arguments: [
        "u1 ", " u1", "u1\t", "\nu1", "u1\u{00A0}", "u1\u{0085}", "\u{3000}u1", "u1\u{2003}",
        "u\u{7F}1", "u\u{01}1", "u\u{9F}1", "", String(repeating: "a", count: 129),
    ])
    func anIdWithInvisibleBytesIsNotWellFormed(_ id: String) {
        #expect(!UserIdPattern.isWellFormed(id))
        #expect(!UserIdPattern.uuid.matches(id))
    }

    @Test(arguments: ["u1", "user 1", "élodie", "a-b_c.d@e", String(repeating: "a", count: 128), "$RCAnonymousID:abc"])
    func anOrdinaryIdIsWellFormed(_ id: String) {
        #expect(UserIdPattern.isWellFormed(id))
    }

    @Test func scrubbingReplacesHisIdsAndDropsAttributesAndKeepsWhatTheFoldReads() throws {
        let payload = try JSON.parse(
            """
            {"api_version":"1.0","event":{"id":"E1","type":"INITIAL_PURCHASE","app_user_id":"u-1",
             "original_app_user_id":"$RCAnonymousID:aa","aliases":["u-1","$RCAnonymousID:aa","$RCAnonymousID:bb"],
             "product_id":"p","price":4.99,"currency":"EUR","purchased_at_ms":1,"note":"u-1",
             "subscriber_attributes":{"$email":{"value":"a@b.c","updated_at_ms":1}},
             "transferred_to":["other-user"]},
             "transactionInfo":{"appAccountToken":"u-1","transactionId":"7"}}
            """)
        let clean = PersonalData.scrub(payload, identities: ["u-1"], tombstone: "erased:x")
        let event = try #require(clean["event"])
        #expect(event["app_user_id"] == "erased:x" && event["note"] == "erased:x")
        #expect(event["original_app_user_id"] == "erased:x")
        #expect(event["aliases"] == ["erased:x"])
        #expect(event["subscriber_attributes"] == nil)
        #expect(event["transferred_to"] == ["other-user"], "another user's id stays")
        #expect(event["product_id"] == "p" && event["price"] == .double(4.99) && event["currency"] == "EUR" && event["id"] == "E1")
        #expect(clean["transactionInfo"]?["appAccountToken"] == "erased:x" && clean["transactionInfo"]?["transactionId"] == "7")
        #expect(!String(decoding: clean.serialized(), as: UTF8.self).contains("u-1"))
        #expect(PersonalData.aliases(in: payload) == ["u-1", "$RCAnonymousID:aa", "$RCAnonymousID:bb", "other-user"])
    }

    @Test func aLongIdInsideALongerStringGoesAndAShortOneStays() throws {
        let long = "0d6f1c9e-6f0b-4a41-9a57-2b1f3f7c9e11"
        let payload: JSON = ["url": .string("https://example.org/users/\(long)/profile"), "short": "u-10", "tx": "2000000001"]
        let clean = PersonalData.scrub(payload, identities: [long, "u-1"], tombstone: "erased:x")
        #expect(clean["url"] == "https://example.org/users/erased:x/profile")
        #expect(clean["short"] == "u-10" && clean["tx"] == "2000000001")
    }

    @Test func aPayloadNamingNobodyIsUnchanged() throws {
        let payload = try JSON.parse(#"{"notificationType":"DID_RENEW","data":{"bundleId":"b","environment":"Production"}}"#)
        #expect(PersonalData.scrub(payload, identities: ["u-1"], tombstone: "erased:x") == payload)
    }
}
