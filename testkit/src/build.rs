//! Programs a test starts, built by cargo from inside the test process.

use std::process::Command;

/// `cargo build -q ARGS` (with `--release` in a release build), as a test
/// runs it to build the programs it starts. What cargo sets for the test
/// process describes the test's package: passed on, build scripts that
/// watch it (ring's watches CARGO_MANIFEST_DIR) see a change from every
/// other build, and ring, rustls and every crate above them were rebuilt
/// each time a test binary of another package built something (2.5 minutes
/// on CI), so it is left out.
pub fn cargo_build(args: &[&str]) -> Command {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let mut cmd = Command::new(cargo);
    cmd.args(["build", "-q"]).args(args);
    if !cfg!(debug_assertions) {
        cmd.arg("--release");
    }
    for (name, _) in std::env::vars_os() {
        let name = name.to_string_lossy();
        let of_the_test = ["CARGO_PKG_", "CARGO_BIN_EXE_"]
            .iter()
            .any(|p| name.starts_with(p))
            || [
                "CARGO_MANIFEST_DIR",
                "CARGO_MANIFEST_PATH",
                "CARGO_CRATE_NAME",
                "CARGO_BIN_NAME",
                "CARGO_PRIMARY_PACKAGE",
                "CARGO_TARGET_TMPDIR",
            ]
            .contains(&name.as_ref());
        if of_the_test {
            cmd.env_remove(name.as_ref());
        }
    }
    cmd
}
