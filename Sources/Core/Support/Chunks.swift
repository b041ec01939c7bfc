extension RandomAccessCollection {
    /// The collection in consecutive slices of at most `size` elements (the last may be
    /// shorter): the rows of one multi-row INSERT, well under a statement's 65,535 placeholders.
    func chunks(of size: Int) -> [SubSequence] {
        precondition(size > 0, "a positive chunk size")
        var slices: [SubSequence] = []
        var start = startIndex
        while start != endIndex {
            let end = index(start, offsetBy: size, limitedBy: endIndex) ?? endIndex
            slices.append(self[start..<end])
            start = end
        }
        return slices
    }
}
