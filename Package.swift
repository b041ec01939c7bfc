// swift-tools-version:6.0
import PackageDescription

/// FCGIBilling: Swift over four C libraries from Debian (libfcgi, MariaDB Connector/C,
/// OpenSSL, jansson). No package dependencies beyond the toolchain.
let strict: [SwiftSetting] = [
    .swiftLanguageMode(.v6),
    .enableUpcomingFeature("ExistentialAny"),
]

let package = Package(
    name: "FCGIBilling",
    products: [
        .executable(name: "billing-fcgi", targets: ["FCGIBilling"]),
        .executable(name: "billing-rpc", targets: ["RPCAdmin"]),
        .library(name: "Core", targets: ["Core"]),
    ],
    targets: [
        .systemLibrary(name: "CFCGI", path: "Sources/CFCGI", pkgConfig: "fcgi",
                       providers: [.apt(["libfcgi-dev"])]),
        .systemLibrary(name: "CMariaDB", path: "Sources/CMariaDB", pkgConfig: "libmariadb",
                       providers: [.apt(["libmariadb-dev"])]),
        .systemLibrary(name: "COpenSSL", path: "Sources/COpenSSL", pkgConfig: "openssl",
                       providers: [.apt(["libssl-dev"])]),
        .systemLibrary(name: "CJansson", path: "Sources/CJansson", pkgConfig: "jansson",
                       providers: [.apt(["libjansson-dev"])]),
        .target(name: "Core", dependencies: ["CFCGI", "CMariaDB", "COpenSSL", "CJansson"],
                swiftSettings: strict),
        .executableTarget(name: "FCGIBilling", dependencies: ["Core"], swiftSettings: strict),
        .executableTarget(name: "RPCAdmin", dependencies: ["Core"], swiftSettings: strict),
        .testTarget(name: "CoreTests", dependencies: ["Core"], swiftSettings: strict),
        .testTarget(name: "IntegrationTests", dependencies: ["Core"], swiftSettings: strict),
    ]
)
