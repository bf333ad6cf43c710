//! A program using WoDi compiles WoDi, the CARMI client and ClassAds, not
//! the daemons, the embedded pool or the owner models (issue "one crate,
//! one concern"): checked on the dependency graph cargo itself resolves.

#[test]
fn wodi_depends_on_neither_daemon_nor_the_pool_nor_the_owner_models() {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let out = std::process::Command::new(cargo)
        .args(["tree", "-p", "wodi", "-e", "normal", "--prefix", "none"])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .expect("run cargo tree");
    assert!(
        out.status.success(),
        "cargo tree failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let tree = String::from_utf8_lossy(&out.stdout);
    let crates: Vec<&str> = tree.lines().filter_map(|l| l.split(' ').next()).collect();
    assert!(crates.contains(&"carmi-api"), "{tree}");
    for heavy in [
        "carmi-local",
        "carmi-global",
        "carmi-pool",
        "owner-model",
        "carmi-cli",
        "wodi-sim",
    ] {
        assert!(!crates.contains(&heavy), "wodi depends on {heavy}:\n{tree}");
    }
}
