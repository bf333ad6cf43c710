//! No ghost jobs (issue 30, item 4): a job started by hand whose
//! application ended while its local RM was down (killed, then started
//! again) ends once that machine reports back, with why, instead of staying
//! `attached` in `carmi q` for ever.

use std::time::{Duration, Instant};

use carmi_api::client::{ConnectOptions, connect};
use carmi_api::msg::JobEnd;
use carmi_tests::{Pool, text};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hand_started_job_whose_application_died_with_its_local_rm_away_ends() {
    let mut pool = Pool::start("ghosts", 1, &[vec![]]);
    pool.wait_registered();
    let opts = ConnectOptions::new(pool.locals[0].app_addr.clone(), pool.secret.clone());
    let (carmi, events) = connect(opts)
        .await
        .unwrap_or_else(|e| panic!("connect: {e}\n{}", pool.logs()));
    let job = carmi.job();
    let queued = |pool: &Pool| {
        let out = pool.carmi().args(["q", "--json"]).output().unwrap();
        let q: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap_or_default();
        q.as_array()
            .into_iter()
            .flatten()
            .any(|j| j["job"] == job.0)
    };
    assert!(queued(&pool), "the job is in the queue");
    // The machine's local RM dies; the application ends while it is away.
    pool.kill_local(0);
    drop(carmi);
    drop(events);
    pool.restart_local(0);
    let deadline = Instant::now() + Duration::from_secs(20);
    while queued(&pool) {
        assert!(
            Instant::now() < deadline,
            "job {job} stays in the queue with nobody behind it\n{}",
            pool.logs()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let out = pool
        .carmi()
        .args(["history", "--json", &job.0.to_string()])
        .output()
        .unwrap();
    let records: Vec<carmi_api::msg::JobRecord> = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("{e}: {}", text(&out.stderr)));
    assert_eq!(records.len(), 1);
    assert_eq!(records[0].end, JobEnd::Detached);
}
