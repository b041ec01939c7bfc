import Testing

@testable import Core

@Suite struct CryptoTests {
    @Test func sha256KnownVectors() {
        #expect(SHA256.hexHash(Array("abc".utf8)) == "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad")
        #expect(SHA256.hexHash([UInt8]()) == "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855")
        let long = Array("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq".utf8)
        #expect(SHA256.hexHash(long) == "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1")
        #expect(SHA256.hash("abc").count == 32)
    }

    @Test func hmacSHA256RFC4231() throws {
        // RFC 4231 test case 2.
        let mac = try HMACSHA256.authenticationCode(
            key: Array("Jefe".utf8),
            message: Array("what do ya want for nothing?".utf8))
        #expect(Hex.encode(mac) == "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843")
        // Test case 1: key = 20 x 0x0b.
        let mac1 = try HMACSHA256.authenticationCode(key: [UInt8](repeating: 0x0b, count: 20), message: Array("Hi There".utf8))
        #expect(Hex.encode(mac1) == "b0344c61d8db38535ca8afceaf0bf12b881dc200c9833da726e9376c2e32cff7")
        // An empty key and message are legal.
        #expect(try HMACSHA256.authenticationCode(key: [UInt8](), message: [UInt8]()).count == 32)
    }

    @Test func constantTimeEqualsDecidesContentAndLength() {
        #expect(constantTimeEquals(Array("secret".utf8), Array("secret".utf8)))
        #expect(!constantTimeEquals(Array("secret".utf8), Array("secreT".utf8)))
        #expect(!constantTimeEquals(Array("secret".utf8), Array("secret ".utf8)))
        #expect(!constantTimeEquals(Array("secret".utf8), []))
        #expect(constantTimeEquals([], []))
        #expect(constantTimeEquals("Bearer abc", "Bearer abc"))
        #expect(!constantTimeEquals("Bearer abc", "Bearer ab"))
    }

    @Test func base64RFC4648Vectors() throws {
        let vectors = [
            "": "", "f": "Zg==", "fo": "Zm8=", "foo": "Zm9v", "foob": "Zm9vYg==",
            "fooba": "Zm9vYmE=", "foobar": "Zm9vYmFy",
        ]
        for (plain, encoded) in vectors {
            #expect(Base64.encode(Array(plain.utf8)) == encoded)
            #expect(try Base64.decode(encoded) == Array(plain.utf8))
            let unpadded = String(encoded.filter { $0 != "=" })
            #expect(Base64URL.encode(Array(plain.utf8)) == unpadded)
            #expect(try Base64URL.decode(unpadded) == Array(plain.utf8))
            #expect(try Base64.decode(unpadded) == Array(plain.utf8))
        }
    }

    @Test func base64URLUsesURLSafeAlphabet() throws {
        let bytes: [UInt8] = [0xfb, 0xff, 0xbf, 0xfe]
        #expect(Base64.encode(bytes) == "+/+//g==")
        #expect(Base64URL.encode(bytes) == "-_-__g")
        #expect(try Base64URL.decode("-_-__g") == bytes)
        #expect(throws: CryptoError.self) { try Base64URL.decode("-_-__g==") }
        #expect(try Base64.decode("+/+//g==") == bytes)
    }

    /// One value, one spelling (SPEC §19): every other spelling of the same bytes is refused.
    @Test func base64URLAcceptsTheCanonicalFormOnly() throws {
        for length in 0..<40 {
            let bytes = (0..<length).map { UInt8(truncatingIfNeeded: $0 &* 37 &+ 11) }
            let canonical = Base64URL.encode(bytes)
            #expect(try Base64URL.decode(canonical) == bytes)
            for padding in ["=", "=="] {
                #expect(throws: CryptoError.self, "\(canonical)\(padding)") { try Base64URL.decode(canonical + padding) }
            }
            guard canonical.utf8.count % 4 != 0, let last = canonical.utf8.last else { continue }
            // Every other last character that decodes to the same bytes (spare bits set).
            let alphabet = Array("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_".utf8)
            let spare: UInt8 = canonical.utf8.count % 4 == 2 ? 0x0f : 0x03
            let value = UInt8(alphabet.firstIndex(of: last)!)
            for other in 1...spare {
                let variant = String(decoding: Array(canonical.utf8.dropLast()) + [alphabet[Int(value | other)]], as: UTF8.self)
                #expect(throws: CryptoError.self, "\(variant)") { try Base64URL.decode(variant) }
            }
        }
    }

    @Test func base64RejectsInvalidInput() {
        for bad in ["Zm9v YmFy", "Zm9v\nYmFy", "Zm=9v", "Zm9vY", "Zm9vYg===", "Zg=", "Zm9v!", "====", "Zg==Zg=="] {
            #expect(throws: CryptoError.self, "\(bad)") { try Base64.decode(bad) }
            #expect(throws: CryptoError.self, "\(bad)") { try Base64URL.decode(bad) }
        }
        #expect(throws: CryptoError.self) { try Base64URL.decode("+/+//g") }
        #expect(throws: CryptoError.self) { try Base64.decode("-_-__g") }
        do {
            _ = try Base64URL.decode("a+b")
        } catch {
            #expect(error.isInvalidEncoding)
            #expect(error.description == "invalid encoding")
        }
    }

    @Test func hexRoundTrip() throws {
        #expect(Hex.encode([0x00, 0xab, 0xff]) == "00abff")
        #expect(try Hex.decode("00ABff") == [0x00, 0xab, 0xff])
        #expect(throws: CryptoError.self) { try Hex.decode("abc") }
        #expect(throws: CryptoError.self) { try Hex.decode("zz") }
    }

    @Test func secureRandomProducesDistinctBytes() throws {
        let a = try SecureRandom.bytes(16)
        let b = try SecureRandom.bytes(16)
        #expect(a.count == 16)
        #expect(a != b)
    }
}
