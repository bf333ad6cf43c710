//! The README's Rust program (`src/main.rs`): short, light, and right on a
//! real pool (issue "WoDi for scientists").

use std::process::Command;
use std::time::Duration;

const PROGRAM: &str = include_str!("../src/main.rs");

#[test]
fn the_program_is_at_most_15_lines_and_the_readme_shows_it() {
    let lines = PROGRAM.lines().filter(|l| !l.trim().is_empty()).count();
    assert!(lines <= 15, "{lines} lines:\n{PROGRAM}");
    let readme = include_str!("../../README.md");
    assert!(
        readme.contains(PROGRAM.trim_end()),
        "README.md no longer shows wodi-hello/src/main.rs as it is"
    );
}

#[test]
fn the_program_compiles_no_daemon_pool_simulator_or_owner_model() {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let out = Command::new(cargo)
        .args([
            "tree",
            "-p",
            "wodi-hello",
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
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let tree = String::from_utf8_lossy(&out.stdout);
    let crates: Vec<&str> = tree.lines().filter_map(|l| l.split(' ').next()).collect();
    assert!(crates.contains(&"wodi"), "{tree}");
    for heavy in [
        "carmi-local",
        "carmi-local-core",
        "carmi-global",
        "carmi-global-core",
        "carmi-pool",
        "owner-model",
        "carmi-cli",
        "wodi-sim",
    ] {
        assert!(
            !crates.contains(&heavy),
            "the program depends on {heavy}:\n{tree}"
        );
    }
}

#[test]
fn the_program_counts_the_primes_below_100_000_on_a_real_pool() {
    // Two machines of two slots: the program's four hosts.
    let pool = carmi_tests::Pool::start("wodi-hello", 2, &vec![Vec::new(); 2]);
    let mut child = Command::new(env!("CARGO_BIN_EXE_wodi-hello"))
        .env("CARMI_LOCAL", &pool.locals[0].app_addr)
        .env("CARMI_SECRET_FILE", &pool.secret_path)
        .env("CARMI_TOKEN", &pool.admin_token)
        .env_remove("CARMI_POOL")
        .env_remove("CARMI_SECRET")
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("start the program");
    // A generous bound so that a lost step fails the test instead of hanging it.
    for _ in 0..1800 {
        if child.try_wait().unwrap().is_some() {
            break;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    if child.try_wait().unwrap().is_none() {
        let _ = child.kill();
    }
    let out = child.wait_with_output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{}\n{stdout}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout.contains("primes below 100,000: 9592\n"), "{stdout}");
    // What it reports is measured, not a ratio a run this short makes meaningless.
    assert!(stdout.contains("100 steps in "), "{stdout}");
    assert!(!stdout.contains("efficiency"), "{stdout}");
}
