//! Helpers shared by WoDi's end-to-end tests. They take the pool as
//! `(local_addr, secret_file)`, so a test can point them at any pool: the
//! `carmi_tests::Pool` harness, an embedded pool, or a real one. The job
//! is started with the token `admin.token` beside the secret file, if
//! there is one (as the test kit writes it), else as `carmi` finds one.

#![allow(dead_code)]

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use wodi::master::{Master, MasterConfig, PoolAddr, ServerCommand, StepOutcome};
use wodi::{CycleId, StepId};

/// What the test worker is sent for step `s`: a short label, or a sleep.
fn step_data(s: u64, step_ms: u64) -> String {
    if step_ms > 0 {
        format!("sleep {step_ms}")
    } else {
        format!("d{s}")
    }
}

/// A master configuration for `count` workers running `worker` on the pool at `(local, secret)`.
pub fn config(local: &str, secret: &Path, worker: &str, count: u32) -> MasterConfig {
    let mut cfg = MasterConfig::new(PathBuf::from(worker), Vec::new(), "true", count);
    cfg.server = ServerCommand::Path(env!("CARGO_BIN_EXE_wodi-server").into());
    // `WODI_TEST_POLICIES=isc` (release Idle, release Suspended, Copy
    // stragglers) runs the end-to-end tests under other policies than the
    // recommended ones, to look for a combination that loses a step.
    if let Ok(p) = std::env::var("WODI_TEST_POLICIES") {
        cfg.policies = wodi::proto::Policies {
            release_idle: p.contains('i'),
            release_suspended: p.contains('s'),
            stragglers: p.contains('c'),
            ..Default::default()
        };
    }
    // `WODI_TEST_SUSPEND_MS=300` shortens a suspended worker's grace (10 s
    // by default, longer than the churn test's suspensions), so that with
    // `s` suspended hosts are really given back during the run.
    if let Some(ms) = std::env::var("WODI_TEST_SUSPEND_MS")
        .ok()
        .and_then(|v| v.parse().ok())
    {
        cfg.suspend_timeout = Duration::from_millis(ms);
    }
    cfg.pool = Some(PoolAddr {
        local: local.to_string(),
        secret_file: secret.to_path_buf(),
        // A test kit's pool keeps its admin token beside its secret
        // (`admin.token`), an embedded pool too (`pool.admin.token`): the
        // server starts the job with it (a pool with tokens needs one).
        token_file: [
            secret.with_file_name("admin.token"),
            secret.with_extension("admin.token"),
        ]
        .into_iter()
        .find(|t| t.exists()),
    });
    cfg
}

pub fn test_worker() -> &'static str {
    env!("CARGO_BIN_EXE_wodi-test-worker")
}

/// Receives until `n` outcomes arrived, with a generous limit so a lost step fails the test.
pub async fn collect(master: &mut Master, n: usize) -> Vec<StepOutcome<String>> {
    let mut out = Vec::new();
    while out.len() < n {
        let next = tokio::time::timeout(Duration::from_secs(60), master.recv_result())
            .await
            .expect("a step outcome within 60 s")
            .expect("the run goes on");
        out.push(next);
    }
    out
}

/// Runs `cycles` cycles of 31 steps on the pool at `(local, secret)` with
/// `workers` workers and checks that every step of every cycle returned
/// exactly once, computed by a worker that had the init and cycle data.
pub async fn cycles_exactly_once(
    local: &str,
    secret: &Path,
    workers: u32,
    cycles: u64,
) -> wodi::Stats {
    cycles_with_steps(local, secret, workers, cycles, 0).await
}

/// [`cycles_exactly_once`] with steps that each sleep `step_ms` in the
/// worker, so that churn of the pool hits steps in the middle.
pub async fn cycles_with_steps(
    local: &str,
    secret: &Path,
    workers: u32,
    cycles: u64,
    step_ms: u64,
) -> wodi::Stats {
    let cfg = config(local, secret, test_worker(), workers);
    let mut master = Master::init(cfg, &"hello".to_string()).await.expect("init");
    for c in 0..cycles {
        let cycle = CycleId(c);
        master.begin_cycle(cycle, &format!("b{c}")).unwrap();
        for s in 0..31 {
            master.send_work(StepId(s), &step_data(s, step_ms)).unwrap();
        }
        let mut seen: BTreeMap<u64, u32> = BTreeMap::new();
        for o in collect(&mut master, 31).await {
            match o {
                StepOutcome::Done(step, r) => {
                    let data = step_data(step.0, step_ms);
                    assert_eq!(r, format!("hello|{cycle}:b{c}|{step}|{data}"));
                    *seen.entry(step.0).or_default() += 1;
                }
                StepOutcome::Failed(step, why) => panic!("{step} failed: {why}"),
            }
        }
        let expected: BTreeMap<u64, u32> = (0..31).map(|s| (s, 1)).collect();
        assert_eq!(seen, expected, "cycle {c}: step ids received");
        master.end_cycle(cycle, &()).unwrap();
    }
    master.complete().await.expect("complete")
}
