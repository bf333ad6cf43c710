//! End to end, the daily loop of a pool user (issue 20): `carmi wait`
//! exits with a job's exit status, over a real `carmi-global` and
//! `carmi-local`, through the `carmi` command as a user types it.

use std::path::Path;
use std::process::Output;

use carmi_tests::{Pool, text, write_job};

fn pool(name: &str) -> Pool {
    Pool::start(name, 2, &[vec!["Arch=\"X86_64\"".to_string()]])
}

/// `carmi` with the masters pinned to m0.
fn carmi(pool: &Pool) -> std::process::Command {
    let mut cmd = pool.carmi();
    cmd.env("CARMI_MACHINE", "m0");
    cmd
}

fn submit(pool: &Pool, sub: &Path) -> String {
    let id = pool.run_ok(carmi(pool).arg("submit").arg(sub));
    id.split_whitespace()
        .find_map(|w| {
            let w = w.trim_start_matches('j').trim_end_matches('.');
            w.parse::<u64>().ok().map(|n| n.to_string())
        })
        .unwrap_or_else(|| panic!("no job id in {id:?}"))
}

fn wait(pool: &Pool, args: &[&str]) -> Output {
    carmi(pool).arg("wait").args(args).output().unwrap()
}

#[test]
fn status_shows_an_owners_attributes_and_the_policy_state() {
    let pool = Pool::start(
        "daily-status",
        2,
        &[vec![
            "HasMatlab=true".to_string(),
            "Lab=\"optics\"".to_string(),
        ]],
    );
    pool.wait_registered();
    let out = carmi(&pool)
        .args([
            "status",
            "-af",
            "Name",
            "HasMatlab",
            "Lab",
            "State",
            "Activity",
        ])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(text(&out.stdout), "m0 true optics Unclaimed Idle\n");
    let out = carmi(&pool).args(["status", "--json"]).output().unwrap();
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let a = &json[0]["attributes"];
    assert_eq!(a["HasMatlab"], true, "{json}");
    assert_eq!(a["Lab"], "optics", "{json}");
    assert_eq!(a["State"], "Unclaimed", "{json}");
    let out = carmi(&pool)
        .args(["status", "-constraint", "State == \"Owner\""])
        .output()
        .unwrap();
    assert!(
        text(&out.stdout).contains("0 machines"),
        "{}",
        text(&out.stdout)
    );
}

#[test]
fn wait_exits_with_the_jobs_exit_status() {
    let pool = pool("daily-wait");
    pool.wait_registered();
    let three = submit(
        &pool,
        &write_job(&pool.dir, "three", "sleep 0.3; exit 3", ""),
    );
    let out = wait(&pool, &[&three]);
    pool.assert_exit(&out, 3);
    // The history has it, with what it used, and -constraint reads HTCondor's names.
    let out = carmi(&pool)
        .args([
            "history",
            "--json",
            "-constraint",
            "ExitCode == 3 && JobStatus == 4",
        ])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out.stderr));
    let records: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let records = records.as_array().unwrap();
    assert_eq!(records.len(), 1, "{records:?}");
    assert_eq!(records[0]["job"].to_string(), three);
    let usage = &records[0]["usage"];
    assert!(usage["started_unix"].as_u64().unwrap() > 0, "{usage}");
    assert_eq!(usage["machines"], serde_json::json!(["m0"]), "{usage}");
    let out = carmi(&pool)
        .args(["history", "-constraint", "ExitCode == 99"])
        .output()
        .unwrap();
    assert!(
        text(&out.stdout).contains("0 jobs"),
        "{}",
        text(&out.stdout)
    );

    let killed = submit(&pool, &write_job(&pool.dir, "killed", "kill -TERM $$", ""));
    let out = wait(&pool, &[&killed]);
    assert_eq!(out.status.code(), Some(128 + 15), "{}", text(&out.stderr));
    assert!(
        text(&out.stderr).contains("signal 15"),
        "{}",
        text(&out.stderr)
    );

    // Still running when the timeout passes; then removed.
    let long = submit(&pool, &write_job(&pool.dir, "long", "sleep 60", ""));
    let out = wait(&pool, &[&long, "--timeout", "0.5"]);
    assert_eq!(out.status.code(), Some(124), "{}", text(&out.stderr));
    // Several at once, as the copies of a `queue N`; one that is not queued
    // is reported without keeping the others.
    let other = submit(&pool, &write_job(&pool.dir, "other", "sleep 60", ""));
    let out = carmi(&pool).args(["rm", &other, "9999"]).output().unwrap();
    assert!(!out.status.success());
    assert!(text(&out.stderr).contains("9999"), "{}", text(&out.stderr));
    assert!(
        text(&out.stdout).contains(&format!("cluster {other} removed")),
        "{}",
        text(&out.stdout)
    );
    let out = carmi(&pool).args(["rm", &long]).output().unwrap();
    assert!(out.status.success(), "{}", text(&out.stderr));
    let out = wait(&pool, &[&long]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        text(&out.stderr).contains("removed"),
        "{}",
        text(&out.stderr)
    );

    let out = wait(&pool, &["9999"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        text(&out.stderr).contains("job 9999 is neither queued"),
        "{}",
        text(&out.stderr)
    );
}

/// A submit file in the style of the HTCondor manual's examples.
const CONDOR_STYLE: &str = "\
# as an HTCondor user writes it
universe                = vanilla
executable              = copy.sh
arguments               = $(Process)
output                  = out.$(Process)
error                   = err.$(Process)
log                     = copies.log
should_transfer_files   = YES
when_to_transfer_output = ON_EXIT
request_cpus            = 1
request_memory          = 1MB
+Department             = \"physics\"
JobBatchName            = sweep
queue 3
";

#[test]
fn an_htcondor_style_submit_file_runs_each_copy() {
    // The machine takes only physics jobs: the custom attribute must reach
    // the job ad for any copy to run.
    let pool = Pool::start(
        "daily-condor",
        2,
        &[vec![
            "Arch=\"X86_64\"".to_string(),
            "Requirements=TARGET.Department == \"physics\"".to_string(),
        ]],
    );
    pool.wait_registered();
    write_job(&pool.dir, "copy", "echo \"copy $1\"", "");
    let sub = pool.dir.join("condor.sub");
    std::fs::write(&sub, CONDOR_STYLE).unwrap();

    let out = carmi(&pool)
        .args(["submit", "-dry-run"])
        .arg(&sub)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out.stderr));
    let ads = text(&out.stdout);
    assert_eq!(ads.matches("Department = \"physics\"").count(), 3, "{ads}");
    assert!(ads.contains("ProcId = 2"), "{ads}");
    assert!(
        ads.contains("Class_class0_Requirements = Cpus >= 1 && Memory >= 1"),
        "{ads}"
    );
    assert!(ads.contains("JobBatchName = \"sweep\""), "{ads}");
    let q = carmi(&pool).args(["q", "--json"]).output().unwrap();
    assert_eq!(text(&q.stdout).trim(), "[]", "a dry run queues nothing");

    let out = carmi(&pool).arg("submit").arg(&sub).output().unwrap();
    assert!(
        out.status.success(),
        "{}\n{}",
        text(&out.stderr),
        pool.logs()
    );
    assert!(!text(&out.stderr).contains("log:"), "{}", text(&out.stderr));
    // One cluster of three procs: its id is printed, the procs are C, C+1, C+2.
    let cluster: u64 = text(&out.stdout).trim().parse().expect("a cluster id");
    let ids: Vec<String> = (0..3).map(|p| (cluster + p).to_string()).collect();
    let out = wait(&pool, &[&cluster.to_string(), "--timeout", "60"]);
    pool.assert_exit(&out, 0);
    for p in 0..3 {
        let got = std::fs::read_to_string(pool.dir.join(format!("out.{p}"))).unwrap();
        assert_eq!(got, format!("copy {p}\n"));
    }
    // `log`: the three copies share one event log, each event of each once
    // (docs/events.md), from `submitted` to `ended`.
    let log = std::fs::read_to_string(pool.dir.join("copies.log")).unwrap();
    for id in &ids {
        let mine: Vec<&str> = log
            .lines()
            .filter(|l| l.split(' ').nth(2) == Some(id.as_str()))
            .collect();
        let numbers: Vec<String> = mine
            .iter()
            .map(|l| l.split(' ').nth(3).unwrap().to_string())
            .collect();
        let expected: Vec<String> = (1..=mine.len()).map(|n| format!("#{n}")).collect();
        assert_eq!(numbers, expected, "{log}");
        assert!(mine[0].contains(" #1 submitted "), "{log}");
        assert!(mine.last().unwrap().ends_with(" ended exit 0"), "{log}");
    }
}
