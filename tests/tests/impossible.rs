//! End to end: a job whose minimums no set of machines in the pool could
//! meet (issue 15, item 2). A real `carmi-global` and two `carmi-local`s, one
//! X86_64 and one AARCH64 machine of two slots each; requests through the
//! `carmi` command. The job waits flagged in `carmi q` and keeps nothing
//! back from the job behind it; `on_impossible = reject` refuses it at
//! submit and `on_impossible = hold` accepts it held, both with the reason.

use std::path::{Path, PathBuf};
use std::time::Duration;

use carmi_api::msg::JobEnd;
use carmi_tests::{Pool, text, write_script};

const MASTER: &str = "#!/bin/sh\nexit 0\n";
const WHY: &str = "cannot start: class class0 needs 3, the pool has 2 matching";

fn write_job(dir: &Path, name: &str, body: &str) -> PathBuf {
    write_script(&dir.join("master.sh"), MASTER);
    let path = dir.join(name);
    std::fs::write(&path, body).unwrap();
    path
}

/// A job of `count` X86_64 machines, with `extra` lines.
fn x86_job(pool: &Pool, name: &str, count: u32, extra: &str) -> PathBuf {
    write_job(
        &pool.dir,
        name,
        &format!(
            "executable = master.sh\n{extra}requirements = Arch == \"X86_64\"\nmachine_count = {count}\nqueue\n"
        ),
    )
}

/// `carmi` with the masters pinned to m0.
fn carmi(pool: &Pool) -> std::process::Command {
    let mut cmd = pool.carmi();
    cmd.env("CARMI_MACHINE", "m0");
    cmd
}

/// Submits `file`; the job id, or the error text.
fn submit(pool: &Pool, file: &Path) -> Result<u64, String> {
    let out = carmi(pool)
        .args(["submit", "--json"])
        .arg(file)
        .output()
        .unwrap();
    if !out.status.success() {
        return Err(text(&out.stderr));
    }
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    Ok(v["job"].as_u64().expect("a job id"))
}

/// How `job` ended, once it is in `carmi history` (60 s at most: a loaded CI machine).
fn wait_history(pool: &Pool, job: u64) -> JobEnd {
    pool.wait_history(&job.to_string(), Duration::from_secs(60))
        .end
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_the_pool_cannot_start_is_flagged_blocks_nobody_and_can_be_refused_or_held() {
    let pool = Pool::start(
        "impossible",
        2,
        &[
            vec!["Arch=\"X86_64\"".to_string()],
            vec!["Arch=\"AARCH64\"".to_string()],
        ],
    );
    pool.wait_registered();
    // Three X86_64 machines of the two: accepted (the default is to wait),
    // flagged in `carmi q` with the class and the numbers.
    let big = submit(&pool, &x86_job(&pool, "big.sub", 3, "")).expect("accepted");
    let out = carmi(&pool).arg("q").output().unwrap();
    let q = text(&out.stdout);
    assert!(q.contains(&format!("^ {WHY}")), "{q}");
    // It keeps nothing back: a job behind it on the X86_64 machines runs
    // and completes while it waits.
    let small = submit(&pool, &x86_job(&pool, "small.sub", 2, "")).expect("accepted");
    assert_eq!(
        wait_history(&pool, small),
        JobEnd::Completed(carmi_api::msg::ExitStatus::Code(0)),
        "{}",
        pool.logs()
    );
    // `on_impossible = reject`: refused at submit, with the reason.
    let err = submit(
        &pool,
        &x86_job(&pool, "reject.sub", 3, "on_impossible = reject\n"),
    )
    .expect_err("refused");
    assert!(
        err.contains(&format!("{WHY} (on_impossible = reject)")),
        "{err}"
    );
    // `on_impossible = hold`: accepted held, with the reason.
    let held = submit(
        &pool,
        &x86_job(&pool, "hold.sub", 3, "on_impossible = hold\n"),
    )
    .expect("accepted");
    let out = carmi(&pool).args(["q", "--json"]).output().unwrap();
    let jobs: Vec<carmi_api::msg::JobStatus> = serde_json::from_slice(&out.stdout).unwrap();
    let shown: Vec<(u64, &str, Option<&str>)> = jobs
        .iter()
        .map(|j| (j.job.0, j.state.as_str(), j.note.as_deref()))
        .collect();
    let hold_reason = format!("{WHY} (on_impossible = hold)");
    assert_eq!(
        shown,
        [
            (big, "waiting", Some(WHY)),
            (held, "held", Some(hold_reason.as_str())),
        ]
    );
}
