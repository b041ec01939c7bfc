/// The configured product catalog (`products`: App Store product id → tier and cadence),
/// with the one rule for a product it does not list: its cadence guessed from the id's
/// wording. Every reader of a product's cadence goes through `cadence(of:)`.
struct ProductCatalog: Sendable {
    let products: [String: BillingConfiguration.Product]

    init(_ products: [String: BillingConfiguration.Product]) {
        self.products = products
    }

    subscript(productId: String) -> BillingConfiguration.Product? { products[productId] }

    /// The catalog's cadence, else one guessed from the id (`…weekly`, `…annual`, …).
    func cadence(of productId: String) -> Cadence? {
        products[productId]?.cadence ?? Cadence.inferred(fromProductId: productId)
    }
}

extension Cadence {
    /// A cadence guessed from a product id's wording, for products missing from the catalog.
    static func inferred(fromProductId id: String) -> Cadence? {
        let lower = Array(id.utf8.lazy.map(\.asciiLowercased))
        func contains(_ word: StaticString) -> Bool {
            let w = UnsafeBufferPointer(start: word.utf8Start, count: word.utf8CodeUnitCount)
            guard lower.count >= w.count else { return false }
            return (0...(lower.count - w.count)).contains { i in w.indices.allSatisfy { lower[i + $0] == w[$0] } }
        }
        if contains("week") { return .weekly }
        if contains("month") { return .monthly }
        if contains("year") || contains("annual") { return .yearly }
        if contains("lifetime") { return .lifetime }
        return nil
    }
}
