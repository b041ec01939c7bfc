extension RandomAccessCollection {
    /// The first index whose element satisfies `belongsInSecondPartition`, in a collection
    /// where every element that does comes after every one that does not (a sorted
    /// collection cut at a value); `endIndex` when none does. A binary search.
    func partitioningIndex(where belongsInSecondPartition: (Element) throws -> Bool) rethrows -> Index {
        var low = startIndex
        var count = self.count
        while count > 0 {
            let half = count / 2
            let mid = index(low, offsetBy: half)
            if try belongsInSecondPartition(self[mid]) {
                count = half
            } else {
                low = index(after: mid)
                count -= half + 1
            }
        }
        return low
    }
}
