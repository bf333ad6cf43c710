//! End to end (issue 23): what a submit costs does not grow with the queue.
//! Two real pools run side by side, one with an empty queue and one holding
//! thousands of jobs that no machine can serve, each asking for something
//! else (they leave the idle slots free for the jobs behind them, so a
//! global RM that went through its whole queue on every submit did it here,
//! and no two are alike, so grouping identical jobs does not help); submits
//! alternate between the two, so both see the same load on the machine.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use carmi_api::admin::request;
use carmi_api::ids::JobId;
use carmi_api::msg::{FromGlobal, ToGlobal};
use carmi_tests::{Pool, submit_request};

const MASTER: &str = "#!/bin/sh\nexit 0\n";

/// Jobs queued in the long queue.
const QUEUED: usize = 5000;

/// Submits a job asking for a machine no pool has, unlike every other job
/// (`Memory >= n`, a new `n` each time); uploads the master when `upload`.
async fn submit(pool: &Pool, upload: bool) -> JobId {
    static N: AtomicU64 = AtomicU64::new(0);
    let n = N.fetch_add(1, Ordering::Relaxed);
    let text = format!(
        "executable = master.sh\nrequirements = Arch == \"PPC\" && Memory >= {n}\nmachine_count = 1\nqueue\n"
    );
    let spec = carmi_api::submit::parse("job.sub", &text).expect("a valid submit file");
    let (exe, msg) = submit_request("tester", MASTER, spec);
    let up = upload.then_some((&exe, MASTER.as_bytes()));
    match request(&pool.global_addr, &pool.secret, up, msg).await {
        Ok(FromGlobal::Submitted { job }) => job,
        other => panic!("submit failed: {other:?}\n{}", pool.logs()),
    }
}

async fn remove(pool: &Pool, job: JobId) {
    match request(
        &pool.global_addr,
        &pool.secret,
        None,
        ToGlobal::RemoveJob {
            job,
            cluster: false,
        },
    )
    .await
    {
        Ok(FromGlobal::Removed { .. }) => {}
        other => panic!("rm failed: {other:?}\n{}", pool.logs()),
    }
}

async fn wait_up(pool: &Pool, slots: usize) {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let machines = carmi_api::admin::pool_status(&pool.global_addr, &pool.secret)
            .await
            .expect("status");
        if machines.iter().map(|m| m.slots.len()).sum::<usize>() == slots {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "pool did not come up\n{}",
            pool.logs()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Time of one submit (and the removal that keeps the queue as it was).
async fn timed_submit(pool: &Pool) -> Duration {
    let start = Instant::now();
    let job = submit(pool, false).await;
    let took = start.elapsed();
    remove(pool, job).await;
    took
}

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_submit_into_a_long_queue_costs_what_one_into_an_empty_queue_costs() {
    let m = || vec!["Arch=\"X86_64\"".to_string()];
    let empty = Pool::start("queue-cost-empty", 4, &[m()]);
    let full = Pool::start("queue-cost-full", 4, &[m()]);
    wait_up(&empty, 4).await;
    wait_up(&full, 4).await;
    submit(&empty, true).await;
    submit(&full, true).await;
    // Fill the long queue, a few requests at a time.
    let full = std::sync::Arc::new(full);
    let mut tasks = Vec::new();
    for _ in 0..8 {
        let full = full.clone();
        tasks.push(tokio::spawn(async move {
            for _ in 0..(QUEUED - 1) / 8 + 1 {
                submit(&full, false).await;
            }
        }));
    }
    for t in tasks {
        t.await.expect("fill task");
    }
    let (mut in_empty, mut in_full) = (Vec::new(), Vec::new());
    for _ in 0..40 {
        in_empty.push(timed_submit(&empty).await);
        in_full.push(timed_submit(&full).await);
    }
    let (e, f) = (median(in_empty), median(in_full));
    eprintln!("median submit: {e:?} into an empty queue, {f:?} behind {QUEUED} jobs");
    // A global RM that visited every waiting job on a submit took tens of
    // milliseconds here (a debug build); the slack covers a loaded machine.
    let bound = e * 3 + Duration::from_millis(10);
    assert!(
        f <= bound,
        "a submit behind {QUEUED} jobs took {f:?} (median), into an empty queue {e:?}: more than {bound:?}"
    );
}
