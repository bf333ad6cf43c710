//! `carmi-bench grant-latency` on the real daemons, briefly: it runs, and
//! reports every phase of a grant with figures that add up. No timing is
//! asserted (the release figures feed the simulator's defaults; see
//! docs/results.md).

use std::process::Command;

#[test]
fn the_grant_latency_benchmark_reports_every_phase() {
    let out = Command::new(env!("CARGO_BIN_EXE_carmi-bench"))
        .args(["grant-latency", "3", "2", "--json"])
        .output()
        .expect("run carmi-bench grant-latency");
    assert!(
        out.status.success(),
        "carmi-bench grant-latency failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("one JSON object");
    assert_eq!(v["grants"], 3, "{v}");
    let phase = |name: &str, q: &str| {
        v["phases"][name][q]
            .as_f64()
            .unwrap_or_else(|| panic!("{name}.{q} in {v}"))
    };
    for name in [
        "match",
        "spawn_cold",
        "spawn_cached",
        "fetch",
        "first_message",
        "started_event",
        "usable_cached",
        "usable_cold",
    ] {
        let (p50, p90, max) = (
            phase(name, "p50_ms"),
            phase(name, "p90_ms"),
            phase(name, "max_ms"),
        );
        assert!(0.0 <= p50 && p50 <= p90 && p90 <= max, "{name}: {v}");
    }
    // Real work was timed: a process was started and its hello came back.
    assert!(phase("spawn_cached", "max_ms") > 0.0, "{v}");
    assert!(
        phase("usable_cached", "max_ms") >= phase("match", "p50_ms"),
        "{v}"
    );
}
