// swift-tools-version:6.0
import PackageDescription

/// FCGIBilling: Swift over five C libraries from Debian (libfcgi, MariaDB Connector/C,
/// OpenSSL, jansson, libcurl). No package dependencies beyond the toolchain.
let strict: [SwiftSetting] = [
    .swiftLanguageMode(.v6),
    .enableUpcomingFeature("ExistentialAny"),
    // Core's `public` surface is the two entry points the executables call; imports are
    // internal unless a file says otherwise, and a file names every module it uses.
    .enableUpcomingFeature("InternalImportsByDefault"),
    .enableUpcomingFeature("MemberImportVisibility"),
]

let package = Package(
    name: "FCGIBilling",
    products: [
        .executable(name: "billing-fcgi", targets: ["FCGIBilling"]),
        .executable(name: "billing-rpc", targets: ["RPCAdmin"]),
        .library(name: "Core", targets: ["Core"]),
    ],
    targets: [
        .systemLibrary(
            name: "CFCGI", path: "Sources/CFCGI", pkgConfig: "fcgi",
            providers: [.apt(["libfcgi-dev"])]),
        .systemLibrary(
            name: "CMariaDB", path: "Sources/CMariaDB", pkgConfig: "libmariadb",
            providers: [.apt(["libmariadb-dev"])]),
        .systemLibrary(
            name: "COpenSSL", path: "Sources/COpenSSL", pkgConfig: "openssl",
            providers: [.apt(["libssl-dev"])]),
        .systemLibrary(
            name: "CJansson", path: "Sources/CJansson", pkgConfig: "jansson",
            providers: [.apt(["libjansson-dev"])]),
        .systemLibrary(
            name: "CCurl", path: "Sources/CCurl", pkgConfig: "libcurl",
            providers: [.apt(["libcurl4-openssl-dev"])]),
        .target(
            name: "Core", dependencies: ["CFCGI", "CMariaDB", "COpenSSL", "CJansson", "CCurl"],
            swiftSettings: strict),
        .executableTarget(name: "FCGIBilling", dependencies: ["Core"], swiftSettings: strict),
        .executableTarget(name: "RPCAdmin", dependencies: ["Core"], swiftSettings: strict),
        .testTarget(name: "CoreTests", dependencies: ["Core"], swiftSettings: strict),
        .testTarget(name: "IntegrationTests", dependencies: ["Core"], swiftSettings: strict),
    ]
)
