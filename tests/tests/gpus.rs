//! End to end, GPUs (issue 32): a local RM configured with one GPU
//! (`--gpus 1`) advertises `GPUs = 1` and a job whose class and master
//! require `GPUs >= 1` runs there; on a pool whose only machine has none
//! (`gpus = 0` in its configuration file, whatever this test machine
//! has) the job is not matched: it waits, flagged, and `carmi q
//! -better-analyze` counts the machine among those its requirements reject.

use std::time::Duration;

use carmi_api::msg::{ExitStatus, JobEnd};
use carmi_tests::{Pool, PoolOptions, text, write_job};

#[test]
fn a_job_requiring_a_gpu_waits_until_a_machine_with_one_joins_and_runs_there() {
    let options = PoolOptions {
        local_settings: "gpus = 0\n".into(),
        ..PoolOptions::default()
    };
    let pool = Pool::start_with("gpus", 1, &[vec![]], options);
    pool.wait_registered();
    // Submitted from outside the pool, so that the global RM places the
    // master too (by its master_requirements).
    let carmi = || pool.carmi();
    let af =
        |cmd: &mut std::process::Command| pool.run_ok(cmd.args(["status", "-af", "Name", "GPUs"]));
    assert_eq!(af(&mut carmi()), "m0 0\n");
    let sub = write_job(
        &pool.dir,
        "gpu",
        "exit 0",
        "requirements = GPUs >= 1\nmaster_requirements = GPUs >= 1\n",
    );
    let job = pool.submit_file(carmi(), &sub).to_string();
    // Not matched by m0: the job waits, flagged, and the analysis says why.
    let q = pool.run_ok(carmi().arg("q"));
    assert!(q.contains("the pool has 0 matching"), "{q}");
    let analysis = pool.run_ok(carmi().args(["q", "-better-analyze", &job]));
    assert!(analysis.contains("requirements: GPUs >= 1"), "{analysis}");
    assert!(
        analysis.contains("1 rejected by the class's requirements"),
        "{analysis}"
    );
    // A machine with a GPU joins (its command line over the shared file's `gpus = 0`).
    let _g1 = pool.start_extra_local("g1", &pool.global_addr, &["--gpus", "1"]);
    pool.wait_until("g1 in carmi status", Duration::from_secs(30), || {
        let out = carmi()
            .args(["status", "-af", "Name", "GPUs"])
            .output()
            .unwrap();
        text(&out.stdout) == "g1 1\nm0 0\n" || text(&out.stdout) == "m0 0\ng1 1\n"
    });
    // As an HTCondor user looks: the machine's whole ad, and one line per machine.
    let ad = pool.run_ok(carmi().args(["status", "-l", "g1"]));
    assert!(
        ad.contains("\nGPUs = 1\n") && ad.contains("\nTotalGPUs = 1\n"),
        "{ad}"
    );
    assert!(!ad.contains("\"m0\""), "{ad}");
    let compact = pool.run_ok(carmi().args(["status", "-compact"]));
    let row = |name: &str| {
        let line = compact.lines().find(|l| l.starts_with(name));
        let words: Vec<String> = line
            .unwrap_or_default()
            .split_whitespace()
            .map(String::from)
            .collect();
        words
    };
    // Machine, Platform, Slots, Cpus, GPUs.
    assert_eq!(row("g1").get(4).map(String::as_str), Some("1"), "{compact}");
    assert_eq!(row("m0").get(4).map(String::as_str), Some("0"), "{compact}");
    let record = pool.wait_history(&job, Duration::from_secs(60));
    assert_eq!(
        record.end,
        JobEnd::Completed(ExitStatus::Code(0)),
        "{record:?}"
    );
    // Its class's host was g1's slot, and its master ran on g1.
    let events = pool.run_ok(carmi().args(["events", &job]));
    for what in ["host-added", "master-started"] {
        let line = events.lines().find(|l| l.contains(what));
        assert!(line.is_some_and(|l| l.ends_with(" g1")), "{events}");
    }
}
