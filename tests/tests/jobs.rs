//! End to end: jobs submitted to a real pool (one `carmi-global`, three
//! `carmi-local` with two slots each), through the admin protocol and the
//! `carmi` command. The masters are shell scripts that run until a stop file
//! appears, so a test decides when a job ends.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use carmi_api::admin::request;
use carmi_api::ids::JobId;
use carmi_api::msg::{FromGlobal, JobStatus, ToGlobal};
use carmi_tests::Pool;

const MASTER: &str = "#!/bin/sh\nwhile [ ! -e \"$STOP\" ]; do sleep 0.05; done\n";

fn pool(name: &str) -> Pool {
    let m = || vec!["Arch=\"X86_64\"".to_string()];
    Pool::start(name, 2, &[m(), m(), m()])
}

/// Submits a job whose master stops when `stop` exists.
async fn submit(pool: &Pool, stop: &Path, machine_count: &str) -> JobId {
    let text = format!(
        "executable = master.sh\nenvironment = STOP={}\nclass_name = w\nrequirements = Arch == \"X86_64\"\nmachine_count = {machine_count}\nqueue\n",
        stop.display()
    );
    pool.submit_admin(MASTER, &text).await
}

async fn queue(pool: &Pool) -> Vec<JobStatus> {
    match request(&pool.global_addr, &pool.secret, None, ToGlobal::Queue).await {
        Ok(FromGlobal::Queue(jobs)) => jobs,
        other => panic!("queue failed: {other:?}"),
    }
}

fn held(jobs: &[JobStatus], job: JobId) -> Option<(String, u32)> {
    jobs.iter()
        .find(|j| j.job == job)
        .map(|j| (j.state.clone(), j.classes.iter().map(|c| c.held).sum()))
}

/// Polls the queue until `want` holds, or panics after 20 s with the queue and logs.
async fn wait_for(pool: &Pool, what: &str, want: impl Fn(&[JobStatus]) -> bool) -> Vec<JobStatus> {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let jobs = queue(pool).await;
        if want(&jobs) {
            return jobs;
        }
        if Instant::now() > deadline {
            panic!(
                "timed out waiting for {what}; queue: {jobs:#?}\n{}",
                pool.logs()
            );
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Waits until every machine has registered (6 slots online).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_jobs_whose_minimums_cannot_both_be_met_run_one_after_the_other() {
    let pool = pool("jobs-fifo");
    pool.wait_registered();
    let (stop_a, stop_b) = (pool.dir.join("stop-a"), pool.dir.join("stop-b"));
    let a = submit(&pool, &stop_a, "4").await;
    let b = submit(&pool, &stop_b, "4").await;
    let jobs = wait_for(&pool, "job a running with 4 hosts", |j| {
        held(j, a) == Some(("running".into(), 4))
    })
    .await;
    assert_eq!(held(&jobs, b), Some(("waiting".into(), 0)), "{jobs:#?}");
    // Still waiting a while later: never a partial hold.
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(held(&queue(&pool).await, b), Some(("waiting".into(), 0)));
    std::fs::write(&stop_a, "").unwrap();
    let jobs = wait_for(&pool, "job b running after a ended", |j| {
        held(j, b) == Some(("running".into(), 4))
    })
    .await;
    assert_eq!(held(&jobs, a), None, "job a ended: {jobs:#?}");
    std::fs::write(&stop_b, "").unwrap();
    wait_for(&pool, "an empty queue", |j| j.is_empty()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_of_2_to_10_grows_to_the_whole_pool_of_6() {
    let pool = pool("jobs-grow");
    pool.wait_registered();
    let stop = pool.dir.join("stop");
    let job = submit(&pool, &stop, "2..10").await;
    let jobs = wait_for(&pool, "the job at 6 hosts", |j| {
        held(j, job) == Some(("running".into(), 6))
    })
    .await;
    let c = &jobs[0].classes[0];
    assert_eq!((c.min, c.max), (2, 10));
    assert!(jobs[0].master.is_some());
    std::fs::write(&stop, "").unwrap();
    wait_for(&pool, "the job to end", |j| j.is_empty()).await;
    let machines = carmi_api::admin::pool_status(&pool.global_addr, &pool.secret)
        .await
        .unwrap();
    assert!(
        machines
            .iter()
            .flat_map(|m| &m.slots)
            .all(|s| s.job.is_none()),
        "every slot freed: {machines:?}"
    );
}

/// `carmi` with the masters pinned to m0.
fn carmi(pool: &Pool) -> std::process::Command {
    let mut cmd = pool.carmi();
    cmd.env("CARMI_MACHINE", "m0");
    cmd
}

fn write_job(dir: &Path, name: &str, body: &str) -> PathBuf {
    std::fs::write(dir.join("master.sh"), MASTER).unwrap();
    let path = dir.join(name);
    std::fs::write(&path, body).unwrap();
    path
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_carmi_command_submits_lists_analyzes_and_removes() {
    let pool = pool("jobs-cli");
    pool.wait_registered();
    let dir = pool.dir.clone();
    let stop = dir.join("stop");
    let good = write_job(
        &dir,
        "good.sub",
        &format!(
            "# a job\nexecutable = master.sh\nenvironment = STOP={}\nclass_name = w\nmachine_count = 7\nqueue\n",
            stop.display()
        ),
    );
    // A mistake: rejected with its line, and no job is created.
    let bad = write_job(
        &dir,
        "bad.sub",
        "executable = master.sh\nmachine_count = 3..1\nqueue\n",
    );
    let out = carmi(&pool).arg("submit").arg(&bad).output().unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("bad.sub:2: machine_count"), "{err}");
    assert!(queue(&pool).await.is_empty());

    let job = pool.submit_file(carmi(&pool), &good);

    // 7 machines on a pool of 6: it waits, and -analyze says why.
    let text = pool.run_ok(carmi(&pool).args(["q", "-analyze", &job.to_string()]));
    assert!(text.contains("waiting"), "{text}");
    assert!(
        text.contains("cannot start: needs 7 at once, 6 idle and 0 reclaimable now"),
        "{text}"
    );
    assert!(text.lines().all(|l| l.chars().count() <= 80), "{text}");
    let out = carmi(&pool).args(["q", "--json"]).output().unwrap();
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("q --json parses");
    assert_eq!(v[0]["state"], "waiting");
    let out = carmi(&pool).arg("q").output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("1 job: 0 running, 1 waiting; 0 hosts held"),
        "{text}"
    );

    pool.run_ok(carmi(&pool).args(["rm", &job.to_string()]));
    assert!(queue(&pool).await.is_empty());
    let out = carmi(&pool)
        .args(["status", "-constraint", "Arch == \"X86_64\"", "--json"])
        .output()
        .unwrap();
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("status --json parses");
    assert_eq!(v.as_array().map(Vec::len), Some(3));
    let out = carmi(&pool)
        .args(["status", "-constraint", "Arch == \"SPARC\""])
        .output()
        .unwrap();
    assert!(String::from_utf8_lossy(&out.stdout).contains("0 machines"));

    // The master's output goes where the submit file says, with its input
    // files beside it and $(Cluster) expanded; its exit ends the job.
    std::fs::write(dir.join("params.txt"), "cycles=35\n").unwrap();
    std::fs::write(
        dir.join("io.sh"),
        "#!/bin/sh\ncat params.txt\necho \"arg $1\"\necho oops >&2\n",
    )
    .unwrap();
    let io = write_job(
        &dir,
        "io.sub",
        "executable = io.sh\narguments = $(Cluster)\noutput = out/$(Cluster).out\nerror = out/$(Cluster).err\ntransfer_input_files = params.txt\nqueue\n",
    );
    let job: u64 = pool
        .run_ok(carmi(&pool).arg("submit").arg(&io))
        .trim()
        .parse()
        .expect("the job id");
    wait_for(&pool, "the io job to end", |j| j.is_empty()).await;
    let deadline = Instant::now() + Duration::from_secs(10);
    let out_file = dir.join(format!("out/{job}.out"));
    let text = loop {
        let text = std::fs::read_to_string(&out_file).unwrap_or_default();
        if text.contains("arg") || Instant::now() > deadline {
            break text;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert_eq!(text, format!("cycles=35\narg {job}\n"), "{}", pool.logs());
    let err = std::fs::read_to_string(dir.join(format!("out/{job}.err"))).unwrap();
    assert_eq!(err, "oops\n");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_running_job_survives_a_restart_of_the_global_rm() {
    let mut pool = pool("jobs-restart");
    pool.wait_registered();
    let (stop, stop_w) = (pool.dir.join("stop"), pool.dir.join("stop-w"));
    let job = submit(&pool, &stop, "2..3").await;
    let before = wait_for(&pool, "the job at 3 hosts", |j| {
        held(j, job) == Some(("running".into(), 3))
    })
    .await;
    // 3 idle and 1 above the running job's minimum: not enough for 5.
    let waiting = submit(&pool, &stop_w, "5").await;
    let master = before[0].master;
    assert_eq!(
        held(&queue(&pool).await, waiting),
        Some(("waiting".into(), 0))
    );
    pool.restart_global();
    // The master kept running at m0 and is known again; the job gets its
    // minimum back before the waiting job may start, and may grow again
    // while machines come back (a waiting job that needs more machines
    // than are back keeps none for itself: issue 15); the waiting job is
    // still queued behind it.
    let after = wait_for(
        &pool,
        "the job running again at its minimum",
        |j| matches!(held(j, job), Some((state, n)) if state == "running" && n >= 2),
    )
    .await;
    assert_eq!(after[0].master, master, "{after:#?}");
    // The owner is the identity that submitted (the test kit's admin
    // token), not what the request said.
    assert_eq!(after[0].owner, "admin");
    assert_eq!(held(&after, waiting), Some(("waiting".into(), 0)));
    // A new job gets a fresh id (once the submit machine is back).
    pool.wait_registered();
    let stop_3 = pool.dir.join("stop-3");
    let third = submit(&pool, &stop_3, "1").await;
    assert!(third.0 > waiting.0, "{third} after {waiting}");
    std::fs::write(&stop, "").unwrap();
    wait_for(&pool, "the job to end after the restart", |j| {
        held(j, job).is_none()
    })
    .await;
    // The other two jobs end too, so that no master is still starting or
    // running while the pool is torn down.
    std::fs::write(&stop_w, "").unwrap();
    std::fs::write(&stop_3, "").unwrap();
    wait_for(&pool, "every job to end", |j| {
        held(j, waiting).is_none() && held(j, third).is_none()
    })
    .await;
}
