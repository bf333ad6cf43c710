//! One small workload run both ways: for real, on an embedded pool whose
//! owners come and go (real global and local RMs, real WoDi server, master
//! and worker processes), and in the simulator on the same owners, speeds
//! and steps. Issue 14's acceptance: run length and efficiency within 15%.

use std::process::Command;

/// Three owners in a 6-host pool, in owner seconds (replayed 120 times
/// faster, so a policy minute is half a second): host01 comes back for two
/// seconds (suspended, then continued), host02 comes back for good (its
/// worker is vacated after the policy's 10 minutes), host03 comes by briefly.
const TRACE: &str = "\
host01 480 arrive
host01 720 leave
host02 600 arrive
host03 900 arrive
host03 960 leave
";

#[test]
fn a_real_run_with_owners_matches_the_simulation_within_fifteen_percent() {
    let dir = std::env::temp_dir().join(format!("wodi-realsim-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("create a scratch folder");
    let trace = dir.join("owners.txt");
    std::fs::write(&trace, TRACE).expect("write the owner trace");
    let out = Command::new(env!("CARGO_BIN_EXE_wodi-bench-realsim"))
        .args(["--hosts", "6", "--cycles", "4", "--speedup", "120"])
        .args(["--suspend-timeout", "2", "--json", "--owners"])
        .arg(format!("trace:{}", trace.display()))
        .output()
        .expect("run wodi-bench-realsim");
    let _ = std::fs::remove_dir_all(&dir);
    assert!(
        out.status.success(),
        "wodi-bench-realsim failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("one JSON object");
    let f = |k: &str| v[k].as_f64().unwrap_or_else(|| panic!("{k} in {v}"));
    // The owners acted on both sides: host02's worker was vacated.
    assert!(f("real_losses") >= 1.0 && f("sim_losses") >= 1.0, "{v}");
    for (real, sim) in [
        ("real_run_length_s", "sim_run_length_s"),
        ("real_efficiency", "sim_efficiency"),
    ] {
        let dev = (f(real) - f(sim)) / f(sim);
        assert!(
            dev.abs() <= 0.15,
            "{real} {:.3} against {sim} {:.3}: {:+.1}%",
            f(real),
            f(sim),
            dev * 100.0
        );
    }
}
