/// What this build is: `--version` on both daemons, `billing_build_info`, `system.health`.
/// The version is the Debian package's (debian/changelog's newest entry; a unit test keeps
/// the two equal), so `dpkg -l fcgibilling` and `billing-rpc --version` agree.
public enum BuildInfo {
    public static let version = "0.10.0"

    /// `billing-fcgi 0.10.0`.
    public static func versionLine(_ program: String) -> String { "\(program) \(version)" }
}
