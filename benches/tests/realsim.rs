//! One small workload run both ways: for real, on an embedded pool whose
//! owners come and go (real global and local RMs, real WoDi server, master
//! and worker processes), and in the simulator on the same owners, speeds
//! and steps, both with WoDi's default policies (`Policies::keep_hosts`).
//! Issue 24's acceptance: run length and efficiency within 10% (issue 14
//! asked 15%) with churning owners.

use std::process::Command;

/// Five owners of a 6-host pool, in owner seconds (replayed 120 times
/// faster, so a policy minute is half a second), all after the first 10 s
/// of wall time so that a loaded machine has started the pool and the
/// workers by then: host01 drops by for 1.5 s (suspended, continued);
/// host02 stays 4 s (its suspended worker is given back after the 2 s
/// grace, the host lent again 7.5 s after its owner leaves); host03 comes
/// back for good; host04 and host05 come by briefly.
const TRACE: &str = "\
host01 1200 arrive
host01 1380 leave
host02 1320 arrive
host02 1800 leave
host03 1500 arrive
host04 1680 arrive
host04 1710 leave
host05 1900 arrive
host05 2000 leave
";

#[test]
fn a_real_run_with_churning_owners_matches_the_simulation_within_ten_percent() {
    let dir = std::env::temp_dir().join(format!("wodi-realsim-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("create a scratch folder");
    let trace = dir.join("owners.txt");
    std::fs::write(&trace, TRACE).expect("write the owner trace");
    let out = Command::new(env!("CARGO_BIN_EXE_wodi-bench-realsim"))
        .args(["--hosts", "6", "--cycles", "8", "--speedup", "120"])
        .args(["--policies", "keep", "--suspend-timeout", "2"])
        .args(["--json", "--owners"])
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
    // The owners acted on both sides: hosts were lost to them.
    assert!(f("real_losses") >= 1.0 && f("sim_losses") >= 1.0, "{v}");
    for (real, sim) in [
        ("real_run_length_s", "sim_run_length_s"),
        ("real_efficiency", "sim_efficiency"),
    ] {
        let dev = (f(real) - f(sim)) / f(sim);
        assert!(
            dev.abs() <= 0.10,
            "{real} {:.3} against {sim} {:.3}: {:+.1}%\n{v}",
            f(real),
            f(sim),
            dev * 100.0
        );
    }
}
