//! End to end: what a client sends is checked at the door (issue 23, items 1
//! and 7). A real `carmi-global` and one `carmi-local`; requests go through
//! the `carmi` command, and through the admin protocol directly as a client
//! that skips the command's own checks would send them.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use carmi_api::admin::request;
use carmi_api::msg::{FromGlobal, JobEnd};
use carmi_tests::{Pool, submit_request, write_script};

const MASTER: &str = "#!/bin/sh\nexit 0\n";

fn pool(name: &str) -> Pool {
    Pool::start(name, 2, &[vec!["Arch=\"X86_64\"".to_string()]])
}

/// `carmi` with the masters pinned to m0.
fn carmi(pool: &Pool) -> std::process::Command {
    let mut cmd = pool.carmi();
    cmd.env("CARMI_MACHINE", "m0");
    cmd
}

/// Writes `master` as `dir/master.sh` and `body` as the submit file `dir/NAME`; its path.
fn write_job(dir: &Path, name: &str, master: &str, body: &str) -> PathBuf {
    write_script(&dir.join("master.sh"), master);
    let path = dir.join(name);
    std::fs::write(&path, body).unwrap();
    path
}

/// A submit as a client that skips `carmi submit`'s checks sends it.
async fn raw_submit(pool: &Pool, spec: carmi_api::submit::JobSpec) -> FromGlobal {
    let (executable, msg) = submit_request("mallory", MASTER, spec);
    let upload = Some((&executable, MASTER.as_bytes()));
    // Generous: a 10 MB frame through TLS in a debug build on a loaded
    // 2-core machine took over 20 s once.
    tokio::time::timeout(
        Duration::from_secs(90),
        request(&pool.global_addr, &pool.secret, upload, msg),
    )
    .await
    .expect("the global RM answers a submit")
    .unwrap_or_else(|e| panic!("submit: {e}\n{}", pool.logs()))
}

/// `carmi status` answers, in bounded time.
fn status_works(pool: &Pool) {
    let t = Instant::now();
    let out = carmi(pool).arg("status").output().unwrap();
    assert!(
        out.status.success(),
        "carmi status failed: {}\n{}",
        String::from_utf8_lossy(&out.stderr),
        pool.logs()
    );
    assert!(String::from_utf8_lossy(&out.stdout).contains("m0"));
    assert!(t.elapsed() < Duration::from_secs(10), "{:?}", t.elapsed());
}

fn queue_is_empty(pool: &Pool) -> bool {
    let out = carmi(pool).args(["q", "--json"]).output().unwrap();
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("q --json parses");
    v.as_array().is_some_and(|a| a.is_empty())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_huge_machine_count_is_refused_naming_the_limit_and_the_global_rm_keeps_serving() {
    let pool = pool("door-count");
    pool.wait_registered();
    let file = write_job(
        &pool.dir,
        "huge.sub",
        MASTER,
        "executable = master.sh\nmachine_count = 4294967295\nqueue\n",
    );
    let out = carmi(&pool).arg("submit").arg(&file).output().unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains(
            "huge.sub:2: machine_count: 4294967295 is above the limit of 100000 machines per class"
        ),
        "{err}"
    );
    // The same job sent straight to the global RM (before the limits, this
    // one message aborted it on a 100 GB allocation).
    let mut spec = carmi_api::submit::parse("huge.sub", "executable = master.sh\nqueue\n").unwrap();
    spec.classes[0].min = u32::MAX;
    spec.classes[0].max = u32::MAX;
    match raw_submit(&pool, spec).await {
        FromGlobal::AdminFailed(f) => assert!(
            f.message.contains(
                "machine_count: 4294967295 is above the limit of 100000 machines per class"
            ),
            "{}",
            f.message
        ),
        other => panic!("accepted: {other:?}"),
    }
    status_works(&pool);
    assert!(queue_is_empty(&pool));
    // At the limit but beyond the pool: accepted, waits, flagged in `carmi q`.
    let file = write_job(
        &pool.dir,
        "big.sub",
        MASTER,
        "executable = master.sh\nmachine_count = 100000\nqueue\n",
    );
    pool.run_ok(carmi(&pool).arg("submit").arg(&file));
    let out = carmi(&pool).arg("q").output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("needs 100000 machines at once; the pool has 2 slots online"),
        "{text}"
    );
    status_works(&pool);
    // It does not hold back the queue: a job behind it runs and completes.
    let file = write_job(
        &pool.dir,
        "small.sub",
        MASTER,
        "executable = master.sh\nmachine_count = 2\nqueue\n",
    );
    let small = pool.submit_file(carmi(&pool), &file);
    let end = wait_history(&pool, small);
    assert_eq!(
        end,
        JobEnd::Completed(carmi_api::msg::ExitStatus::Code(0)),
        "{}",
        pool.logs()
    );
}

/// How `job` ended, once it is in `carmi history` (20 s at most).
fn wait_history(pool: &Pool, job: u64) -> JobEnd {
    pool.wait_history(&job.to_string(), Duration::from_secs(20))
        .end
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_ten_megabyte_arguments_line_is_refused_at_submit() {
    let pool = pool("door-args");
    pool.wait_registered();
    let body = format!(
        "executable = master.sh\narguments = {}\nqueue\n",
        "x".repeat(10 << 20)
    );
    let file = write_job(&pool.dir, "long.sub", MASTER, &body);
    let out = carmi(&pool).arg("submit").arg(&file).output().unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("long.sub:2: arguments (argument 1): 10485760 bytes is above the limit of 131071 bytes per argument"),
        "{err}"
    );
    // Sent straight to the global RM: refused there too, and no job is queued
    // to vanish when its master cannot be started.
    let mut spec = carmi_api::submit::parse("long.sub", "executable = master.sh\nqueue\n").unwrap();
    spec.arguments = vec!["x".repeat(10 << 20)];
    match raw_submit(&pool, spec).await {
        FromGlobal::AdminFailed(f) => {
            assert!(
                f.message.contains("10485760 bytes is above"),
                "{}",
                f.message
            )
        }
        other => panic!("accepted: {other:?}"),
    }
    // A file above the submit-file limit is refused before it is read.
    let body = format!(
        "# {}\nexecutable = master.sh\nqueue\n",
        "x".repeat(17 << 20)
    );
    let file = write_job(&pool.dir, "huge-file.sub", MASTER, &body);
    let out = carmi(&pool).arg("submit").arg(&file).output().unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains(
            "huge-file.sub: the file: 17825824 bytes is above the limit of 16777216 bytes"
        ),
        "{err}"
    );
    assert!(queue_is_empty(&pool));
    status_works(&pool);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_master_that_cannot_start_is_held_with_the_exec_error_and_history_keeps_its_end() {
    let mut pool = pool("door-history");
    pool.wait_registered();
    // Its interpreter does not exist: `exec` fails with ENOENT. (A file
    // with no `#!` at all would be run by /bin/sh, as execvp does.)
    let file = write_job(
        &pool.dir,
        "broken.sub",
        "#!/nonexistent/carmi-interpreter\nexit 0\n",
        "executable = master.sh\nqueue\n",
    );
    let job = pool.submit_file(carmi(&pool), &file);
    // The job's own fault: tried max_start_failures (3) times, then held
    // with the exec error, never ended "failed to start" (issue 30).
    let deadline = Instant::now() + Duration::from_secs(20);
    let note = loop {
        let out = carmi(&pool).args(["q", "--json"]).output().unwrap();
        let q: serde_json::Value = serde_json::from_slice(&out.stdout).expect("q --json parses");
        if q[0]["state"] == "held" {
            break q[0]["note"].as_str().unwrap_or_default().to_string();
        }
        assert!(
            Instant::now() < deadline,
            "job {job} was never held: {q}\n{}",
            pool.logs()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert!(
        note.contains("failed to start 3 times") && note.contains("No such file or directory"),
        "{note}"
    );
    // The job's event log says it too: each try, then the hold.
    let out = carmi(&pool)
        .args(["events", &job.to_string()])
        .output()
        .unwrap();
    let events = String::from_utf8_lossy(&out.stdout);
    assert!(
        events.matches(" requeued ").count() == 2
            && events.contains(" held ")
            && events.contains("No such file or directory"),
        "{events}"
    );
    // Removed by its owner, it reaches the history.
    pool.run_ok(carmi(&pool).args(["rm", &job.to_string()]));
    assert_eq!(wait_history(&pool, job), JobEnd::Removed);
    assert!(queue_is_empty(&pool));
    let out = carmi(&pool).args(["history", "99"]).output().unwrap();
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("99 is not in the history"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // A completed job is recorded with its exit status.
    let ok = write_job(
        &pool.dir,
        "ok.sub",
        MASTER,
        "executable = master.sh\nqueue\n",
    );
    let ok_job = pool.submit_file(carmi(&pool), &ok);
    assert_eq!(
        wait_history(&pool, ok_job),
        JobEnd::Completed(carmi_api::msg::ExitStatus::Code(0))
    );
    // The history is journaled: a restarted global RM still has both.
    pool.restart_global();
    let out = carmi(&pool).args(["history", "--json"]).output().unwrap();
    assert!(
        out.status.success(),
        "{}\n{}",
        String::from_utf8_lossy(&out.stderr),
        pool.logs()
    );
    let records: Vec<carmi_api::msg::JobRecord> = serde_json::from_slice(&out.stdout).unwrap();
    let ends: Vec<(u64, &JobEnd)> = records.iter().map(|r| (r.job.0, &r.end)).collect();
    assert_eq!(ends.len(), 2, "{records:?}");
    assert_eq!(ends[0].0, job);
    assert_eq!(ends[0].1, &JobEnd::Removed);
    assert_eq!(
        ends[1],
        (
            ok_job,
            &JobEnd::Completed(carmi_api::msg::ExitStatus::Code(0))
        )
    );
    // HTCondor's `-limit N`: the last N to end.
    let out = carmi(&pool)
        .args(["history", "-limit", "1", "--json"])
        .output()
        .unwrap();
    let records: Vec<carmi_api::msg::JobRecord> = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(records.len(), 1);
    assert_eq!(records[0].job.0, ok_job);
}
