// libFuzzer entry point of `billing-fuzz` (built by scripts/fuzz, never by the package).
//
// This file and FuzzTargets.swift are compiled together with every Core source into one
// module named Core, so a target can reach internal API (e.g. PayloadReader). One binary
// serves every target: the target is chosen by the environment variable FUZZ_TARGET, read
// once. A crash found here becomes a regression test in Tests/CoreTests/HostileInputRegressionTests.swift.
import Glibc

@_cdecl("LLVMFuzzerTestOneInput")
public func billingFuzzTestOneInput(_ data: UnsafePointer<UInt8>?, _ size: Int) -> CInt {
    let bytes = data.map { Array(UnsafeBufferPointer(start: $0, count: size)) } ?? []
    FuzzTargets.selected.body(bytes)
    return 0
}
