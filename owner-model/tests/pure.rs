//! The owner models are pure: a simulator links them without an async
//! runtime or a daemon (issue "one crate, one concern"), checked on the
//! dependency graph cargo itself resolves.

#[test]
fn owner_model_depends_on_no_runtime_and_no_daemon() {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let out = std::process::Command::new(cargo)
        .args([
            "tree",
            "-p",
            "owner-model",
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
    assert!(crates.contains(&"carmi-proto"), "{tree}");
    for heavy in ["tokio", "carmi-api", "carmi-local", "carmi-global"] {
        assert!(
            !crates.contains(&heavy),
            "owner-model depends on {heavy}:\n{tree}"
        );
    }
}
