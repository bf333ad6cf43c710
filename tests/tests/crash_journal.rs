//! The journal under crashes: submissions arrive without pause while the
//! global RM is killed with SIGKILL at random moments and started again;
//! after each restart every submission it acknowledged is in its queue, and
//! none is there twice.
//!
//! Each submission carries a serial number in its `submitted_unix` field
//! (the submitter's clock, kept as given), so that a submission journaled
//! twice under two job ids would show. `CARMI_CRASH_ROUNDS` sets the rounds
//! (default 50); `CARMI_CRASH_ROUNDS=1000 cargo test -p carmi-tests --test
//! crash_journal` is the long form.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use carmi_api::admin::{request, request_with_payload};
use carmi_api::exe::sha256_hex;
use carmi_api::handshake::Secret;
use carmi_api::msg::{ExecutableRef, FromGlobal, SubmitRequest, ToGlobal};
use carmi_tests::{Pool, PoolOptions};
use tokio::sync::Mutex;

/// Serial numbers start here, far from any real clock.
const FIRST_SERIAL: u64 = 1_000_000;
/// Submitters at once.
const SUBMITTERS: usize = 4;

fn rounds() -> usize {
    std::env::var("CARMI_CRASH_ROUNDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(50)
}

/// A small pseudo-random sequence (xorshift), seeded per run and printed,
/// so that a failing run's moments can be replayed.
struct Moments(u64);

impl Moments {
    fn next_ms(&mut self, below: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 % below
    }
}

/// The master's executable and a spec that waits forever without holding a
/// host (no machine has that much memory; the pool has no machine anyway).
fn job() -> (ExecutableRef, Vec<u8>, carmi_api::submit::JobSpec) {
    let bytes = b"#!/bin/sh\nexit 0\n".to_vec();
    let exe = ExecutableRef {
        name: "master".into(),
        sha256: sha256_hex(&bytes),
        size: bytes.len() as u64,
    };
    let spec = carmi_api::submit::parse(
        "crash.sub",
        "executable = master\nrequest_memory = 1000000\nqueue\n",
    )
    .expect("the submit file parses");
    (exe, bytes, spec)
}

/// Submits until `stop`, recording each acknowledged serial with its job id.
async fn submitter(
    addr: String,
    secret: Secret,
    serials: Arc<AtomicU64>,
    acked: Arc<Mutex<HashMap<u64, u64>>>,
    stop: Arc<AtomicBool>,
) {
    let (exe, bytes, spec) = job();
    while !stop.load(Ordering::Relaxed) {
        let serial = serials.fetch_add(1, Ordering::Relaxed);
        let msg = ToGlobal::Submit(Box::new(SubmitRequest {
            owner: "crash".into(),
            machine: "nowhere".into(),
            executable: exe.clone(),
            spec: spec.copy(0),
            submitted_unix: serial,
            anywhere: true,
            procs: Vec::new(),
            max_materialize: None,
            max_idle: None,
        }));
        // The executable travels with each submission: a restart between
        // two of them must not lose it either.
        let uploads = [(&exe, bytes.as_slice())];
        match request_with_payload(&addr, &secret, &uploads, msg).await {
            Ok((FromGlobal::Submitted { job }, _)) => {
                acked.lock().await.insert(serial, job.0);
            }
            // Killed mid-request, or not yet listening: not acknowledged.
            _ => tokio::time::sleep(Duration::from_millis(5)).await,
        }
    }
}

/// The queue's jobs by serial; panics naming a serial seen twice.
async fn queue_by_serial(pool: &Pool) -> HashMap<u64, u64> {
    let mut last = None;
    for _ in 0..300 {
        match request(&pool.global_addr, &pool.secret, None, ToGlobal::Queue).await {
            Ok(FromGlobal::Queue(q)) => {
                let mut by_serial = HashMap::new();
                for j in q {
                    if let Some(other) = by_serial.insert(j.submitted_unix, j.job.0) {
                        panic!(
                            "submission {} is in the queue twice, as j{other} and j{}",
                            j.submitted_unix, j.job.0
                        );
                    }
                }
                return by_serial;
            }
            other => last = Some(format!("{other:?}")),
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!(
        "the restarted global RM did not answer: {last:?}\n{}",
        pool.logs()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_acknowledged_submission_survives_sigkill_once_and_only_once() {
    let options = PoolOptions {
        heartbeat_ms: 1000,
        ..PoolOptions::default()
    };
    let mut pool = Pool::start_with("crash", 1, &[], options);
    let seed = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(1, |d| d.as_nanos() as u64)
        | 1;
    eprintln!("crash moments seed {seed}");
    let mut moments = Moments(seed);
    let serials = Arc::new(AtomicU64::new(FIRST_SERIAL));
    let acked = Arc::new(Mutex::new(HashMap::new()));
    let stop = Arc::new(AtomicBool::new(false));
    let mut tasks = Vec::new();
    for _ in 0..SUBMITTERS {
        tasks.push(tokio::spawn(submitter(
            pool.global_addr.clone(),
            pool.secret.clone(),
            serials.clone(),
            acked.clone(),
            stop.clone(),
        )));
    }
    let mut total_acked = 0;
    for round in 0..rounds() {
        tokio::time::sleep(Duration::from_millis(20 + moments.next_ms(400))).await;
        // The acknowledgements so far all came before the kill.
        let before: HashMap<u64, u64> = acked.lock().await.clone();
        tokio::task::block_in_place(|| pool.restart_global());
        let queue = queue_by_serial(&pool).await;
        for (serial, job) in &before {
            assert_eq!(
                queue.get(serial),
                Some(job),
                "round {round} (seed {seed}): submission {serial}, acknowledged as j{job}, \
                 is not in the queue after the restart\n{}",
                pool.logs()
            );
        }
        total_acked = before.len();
    }
    stop.store(true, Ordering::Relaxed);
    for t in tasks {
        let _ = t.await;
    }
    eprintln!(
        "{} rounds, {total_acked} submissions acknowledged",
        rounds()
    );
    assert!(
        total_acked >= rounds(),
        "too few submissions were acknowledged ({total_acked}) for the test to mean anything"
    );
}
