import Testing
@Test func integrationPlaceholder() { #expect(Bool(true)) }
