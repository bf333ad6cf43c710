//! End to end over real daemons (issue 15, item 2): a job the pool could
//! start at submit becomes impossible when a machine leaves. A waiting one
//! is flagged in `carmi q` with why, one submitted with `on_impossible =
//! hold` is held with it, and a later job runs on what is left.

use std::path::Path;
use std::time::{Duration, Instant};

use carmi_api::msg::{JobEnd, JobStatus};
use carmi_tests::{Pool, text, write_job};

const WHY: &str = "cannot start: needs 4 machines at once; the pool has 2 slots online";

fn carmi(pool: &Pool) -> std::process::Command {
    let mut cmd = pool.carmi();
    cmd.env("CARMI_MACHINE", "m0");
    cmd
}

fn submit(pool: &Pool, sub: &Path) -> u64 {
    pool.submit_file(carmi(pool), sub)
}

fn queue(pool: &Pool) -> Vec<JobStatus> {
    let out = carmi(pool).args(["q", "--json"]).output().unwrap();
    serde_json::from_slice(&out.stdout).unwrap_or_default()
}

/// (state, note, hosts held) of `job` in the queue, if it is there.
fn state(pool: &Pool, job: u64) -> Option<(String, Option<String>, u32)> {
    queue(pool).into_iter().find(|j| j.job.0 == job).map(|j| {
        let held = j.classes.iter().map(|c| c.held).sum();
        (j.state, j.note, held)
    })
}

/// Waits up to 60 s (a loaded CI machine) for `cond` on `job`'s state.
async fn wait_state(
    pool: &Pool,
    job: u64,
    what: &str,
    cond: impl Fn(&Option<(String, Option<String>, u32)>) -> bool,
) {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let s = state(pool, job);
        if cond(&s) {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "job {job}: {what}; it is {s:?}\n{}",
            pool.logs()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_made_impossible_by_a_lost_machine_is_flagged_or_held_and_later_jobs_run() {
    let mut pool = Pool::start(
        "shrink",
        2,
        &[
            vec!["Site=\"a\"".to_string()],
            vec!["Site=\"b\"".to_string()],
        ],
    );
    pool.wait_registered();
    let dir = pool.dir.clone();
    // Job 1 holds m1's two slots; jobs 2 (hold) and 3 (wait) want all four,
    // possible while m1 is there; job 4 wants one and waits behind them.
    let first = submit(
        &pool,
        &write_job(
            &dir,
            "long",
            "sleep 240",
            "requirements = Site == \"b\"\nmachine_count = 2\n",
        ),
    );
    wait_state(
        &pool,
        first,
        "running on m1",
        |s| matches!(s, Some((st, _, 2)) if st == "running"),
    )
    .await;
    let hold = submit(
        &pool,
        &write_job(
            &dir,
            "hold",
            "exit 0",
            "on_impossible = hold\nmachine_count = 4\n",
        ),
    );
    let wait = submit(
        &pool,
        &write_job(&dir, "wait", "exit 0", "machine_count = 4\n"),
    );
    let small = submit(
        &pool,
        &write_job(&dir, "small", "exit 0", "machine_count = 1\n"),
    );
    for j in [hold, wait, small] {
        let s = state(&pool, j);
        assert!(
            matches!(&s, Some((st, None, 0)) if st == "waiting"),
            "job {j} before the loss: {s:?}"
        );
    }

    pool.kill_local(1);
    let held_reason = format!("{WHY} (on_impossible = hold)");
    wait_state(
        &pool,
        hold,
        "held once m1 is lost",
        |s| matches!(s, Some((st, Some(n), _)) if st == "held" && *n == held_reason),
    )
    .await;
    wait_state(
        &pool,
        wait,
        "flagged once m1 is lost",
        |s| matches!(s, Some((st, Some(n), _)) if st == "waiting" && n == WHY),
    )
    .await;
    let out = carmi(&pool).arg("q").output().unwrap();
    assert!(
        text(&out.stdout).contains(&format!("^ {WHY}")),
        "{}",
        text(&out.stdout)
    );
    // The small job behind them runs on m0 and completes.
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let out = carmi(&pool)
            .args(["history", "--json", &small.to_string()])
            .output()
            .unwrap();
        if out.status.success() {
            let records: Vec<carmi_api::msg::JobRecord> =
                serde_json::from_slice(&out.stdout).expect("history --json parses");
            assert_eq!(
                records[0].end,
                JobEnd::Completed(carmi_api::msg::ExitStatus::Code(0))
            );
            break;
        }
        assert!(
            Instant::now() < deadline,
            "job {small} never ran\n{}",
            pool.logs()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}
