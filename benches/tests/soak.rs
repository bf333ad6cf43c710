//! The soak's short form (issue 22, item 6): 200 owner arrive/leave cycles
//! on 4 machines of a real pool while a WoDi run computes steps on them.
//! The suspensions outlast the workers' grace, so steps are sent again and
//! hosts given back and granted again during the run. Behaviour only: every
//! step is delivered exactly once with its own result, no process of the run
//! is left, and no daemon logs an error. The full soak is a command
//! (`BENCHMARKS.md`, "Soak").

use std::process::Command;

#[test]
fn owner_cycles_under_a_wodi_run_deliver_every_step_once_and_leave_no_process() {
    let out = Command::new(env!("CARGO_BIN_EXE_carmi-owner-bench"))
        .args(["soak", "200", "--machines", "4", "--period-ms", "120"])
        .args(["--grace-ms", "60", "--step-ms", "5", "--every", "50"])
        .output()
        .expect("run carmi-owner-bench soak");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "the soak failed:\n{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let line = stdout
        .lines()
        .find_map(|l| l.strip_prefix("soak-result "))
        .unwrap_or_else(|| panic!("no soak-result line in:\n{stdout}"));
    let v: serde_json::Value = serde_json::from_str(line).expect("soak-result is JSON");
    let n = |k: &str| v[k].as_u64().unwrap_or_else(|| panic!("{k} in {v}"));
    assert_eq!(n("cycles"), 200, "{stdout}");
    assert!(n("steps_sent") > 0, "{stdout}");
    // The owners stopped real worker processes, not only idle machines.
    assert!(n("suspensions") > 0, "{stdout}");
    assert_eq!(n("steps_delivered"), n("steps_sent"), "{stdout}");
    for k in [
        "steps_twice",
        "steps_missing",
        "steps_wrong",
        "steps_failed",
        "processes_left",
        "errors",
    ] {
        assert_eq!(n(k), 0, "{k}:\n{stdout}");
    }
}
