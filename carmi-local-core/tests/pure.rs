//! The local RM's core and owner policy are pure by construction: nothing in
//! this crate's dependency tree can do asynchronous I/O (issue "one crate, one
//! concern"). Checked on the graph cargo itself resolves, so adding a
//! dependency that pulls tokio (or `carmi-api`, which does) fails here.

#[test]
fn the_local_core_has_no_async_runtime_in_its_dependency_tree() {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let out = std::process::Command::new(cargo)
        .args([
            "tree",
            "-p",
            "carmi-local-core",
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
    // The tree is the one asked for (not an empty answer that passes anything).
    assert!(crates.contains(&"carmi-proto"), "{tree}");
    for io in ["tokio", "mio", "carmi-api", "carmi-local"] {
        assert!(
            !crates.contains(&io),
            "carmi-local-core depends on {io}:\n{tree}"
        );
    }
}
