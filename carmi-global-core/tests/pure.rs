//! The global RM's core is pure by construction: no async runtime and no
//! transport in its dependency tree, so no decision can wait on I/O (issue
//! "one crate, one concern"). Checked on the graph cargo itself resolves.

#[test]
fn the_core_depends_on_neither_tokio_nor_the_client_library() {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let out = std::process::Command::new(cargo)
        .args([
            "tree",
            "-p",
            "carmi-global-core",
            "-e",
            "normal",
            "--prefix",
            "none",
        ])
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
    // The tree is read right: the protocol's data is there.
    assert!(crates.contains(&"carmi-proto"), "{tree}");
    for heavy in ["tokio", "mio", "carmi-api", "carmi-global", "carmi-local"] {
        assert!(
            !crates.contains(&heavy),
            "carmi-global-core depends on {heavy}:\n{tree}"
        );
    }
}
