//! End to end, over real daemons: a job's own policy expressions (issue 32,
//! item 3), as HTCondor users write them. A job with `periodic_remove =
//! (time() - QDate) > 5` is removed by the global RM once its deadline
//! passed and not before (judged from its history's submit and end times,
//! not from this test's clock); a job with `on_exit_remove = ExitCode == 0`
//! whose master fails once runs again, and ends once, when it succeeds.

use std::path::{Path, PathBuf};
use std::time::Duration;

use carmi_api::msg::{ExitStatus, JobEnd};
use carmi_tests::Pool;

fn pool(name: &str) -> Pool {
    let pool = Pool::start(name, 2, &[vec![]]);
    pool.wait_registered();
    pool
}

fn submit_dir(pool: &Pool) -> PathBuf {
    let dir = pool.dir.join("submit");
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// `carmi history --json JOB`: every record of the job.
fn history(pool: &Pool, dir: &Path, job: &str) -> Vec<serde_json::Value> {
    let out = pool.run_ok(pool.carmi_in(dir).args(["history", "--json", job]));
    serde_json::from_str::<serde_json::Value>(&out)
        .expect("history --json parses")
        .as_array()
        .cloned()
        .unwrap_or_default()
}

#[test]
fn periodic_remove_removes_a_running_job_after_its_deadline() {
    let pool = pool("periodic-remove");
    let dir = submit_dir(&pool);
    let job = pool.submit_script(
        &dir,
        "#!/bin/sh\nsleep 120\n",
        "executable = master.sh\nperiodic_remove = (time() - QDate) > 5\nqueue\n",
    );
    let record = pool.wait_history(&job, Duration::from_secs(60));
    assert_eq!(
        record.end,
        JobEnd::RemovedByPolicy("removed by periodic_remove: (time() - QDate) > 5".into()),
        "{}",
        pool.logs()
    );
    // `time() - QDate` is first above 5 six seconds after the submit.
    let lived = record.ended_unix.saturating_sub(record.submitted_unix);
    assert!(lived >= 6, "removed {lived} s after its submit");
    // `carmi q` no longer shows it, and `carmi history` says why it went.
    let q = pool.run_ok(pool.carmi_in(&dir).arg("q"));
    assert!(
        !q.lines()
            .skip(1)
            .any(|l| l.split_whitespace().next() == Some(job.as_str())),
        "{q}"
    );
    let text = pool.run_ok(pool.carmi_in(&dir).args(["history", &job]));
    assert!(text.contains("removed by periodic_remove"), "{text}");
}

#[test]
fn on_exit_remove_requeues_a_failed_job_until_it_succeeds() {
    let pool = pool("on-exit-remove");
    let dir = submit_dir(&pool);
    let counter = dir.join("runs");
    std::fs::create_dir_all(&counter).unwrap();
    // Fails its first run, succeeds its second: the count is kept in a
    // directory named by its argument.
    let master = "#!/bin/sh\n\
        n=$(cat \"$1/count\" 2>/dev/null || echo 0)\n\
        n=$((n + 1))\n\
        echo $n > \"$1/count\"\n\
        [ \"$n\" -ge 2 ] && exit 0\n\
        exit 1\n";
    let submit = format!(
        "executable = master.sh\narguments = {}\non_exit_remove = ExitCode == 0\nqueue\n",
        counter.display()
    );
    let job = pool.submit_script(&dir, master, &submit);
    let record = pool.wait_history(&job, Duration::from_secs(60));
    assert_eq!(
        record.end,
        JobEnd::Completed(ExitStatus::Code(0)),
        "{}",
        pool.logs()
    );
    assert_eq!(record.usage.starts, 2, "{record:?}");
    let runs = std::fs::read_to_string(counter.join("count")).unwrap();
    assert_eq!(runs.trim(), "2");
    assert_eq!(history(&pool, &dir, &job).len(), 1, "the job ended once");
}
