import Testing

@testable import Core

@Suite struct ChunksTests {
    @Test func slicesCoverTheCollectionInOrderAndOnlyTheLastIsShort() {
        #expect(Array(0..<7).chunks(of: 3).map(Array.init) == [[0, 1, 2], [3, 4, 5], [6]])
        #expect(Array(0..<6).chunks(of: 3).map(Array.init) == [[0, 1, 2], [3, 4, 5]])
        #expect([Int]().chunks(of: 3).isEmpty)
        #expect(Array(0..<2).chunks(of: 1000).map(Array.init) == [[0, 1]])
        // A slice keeps its base's indices.
        let slice = Array(0..<10)[4..<9]
        #expect(slice.chunks(of: 2).map(\.startIndex) == [4, 6, 8])
    }
}
