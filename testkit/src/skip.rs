//! Tests that need something of the machine (root, a cgroup controller,
//! network namespaces): where it is missing they print `SKIP <test>: <why>`
//! and pass, so the README's test command passes on any machine, except
//! under `CARMI_CI_REQUIRE_SERVICES=1` (CI, which must not skip), where they fail.

/// True when `test` may run (`missing` is `None`); otherwise prints the
/// skip line, or panics with it in CI.
pub fn ready_unless(test: &str, missing: Option<String>) -> bool {
    let Some(why) = missing else {
        return true;
    };
    let msg = format!("SKIP {test}: {why}");
    if std::env::var("CARMI_CI_REQUIRE_SERVICES").is_ok_and(|v| v == "1") {
        panic!("{msg}");
    }
    eprintln!("{msg}");
    false
}

/// Why this process cannot act as root, if it cannot.
pub fn not_root() -> Option<String> {
    // SAFETY: geteuid has no failure and no memory effects.
    let euid = unsafe { libc::geteuid() };
    (euid != 0).then(|| format!("root not available (running as uid {euid})"))
}

/// True when `test`, which needs root, may run (see [`ready_unless`]).
pub fn root_ready(test: &str) -> bool {
    ready_unless(test, not_root())
}
