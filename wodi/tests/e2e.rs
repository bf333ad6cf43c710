//! WoDi end to end on a real pool (`carmi_tests::Pool`: a global RM and local
//! RMs as processes): master library, `wodi-server`, workers spawned by CARMI.
//! The helpers take the pool as `(local_addr, secret_file)` so that the same
//! tests can be pointed at any pool.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use carmi_tests::Pool;
use wodi::master::{Master, MasterConfig, PoolAddr, ServerCommand, StepOutcome};
use wodi::{CycleId, StepId};

/// A pool of `n` one-slot machines.
fn pool(name: &str, n: usize) -> Pool {
    Pool::start(name, 1, &vec![Vec::new(); n])
}

/// A master configuration for `count` workers running `worker` on the pool at `(local, secret)`.
fn config(local: &str, secret: &Path, worker: &str, count: u32) -> MasterConfig {
    let mut cfg = MasterConfig::new(PathBuf::from(worker), Vec::new(), "true", count);
    cfg.server = ServerCommand::Path(env!("CARGO_BIN_EXE_wodi-server").into());
    cfg.pool = Some(PoolAddr {
        local: local.to_string(),
        secret_file: secret.to_path_buf(),
    });
    cfg
}

fn test_worker() -> &'static str {
    env!("CARGO_BIN_EXE_wodi-test-worker")
}

/// Receives until `n` outcomes arrived, with a generous limit so a lost step fails the test.
async fn collect(master: &mut Master, n: usize) -> Vec<StepOutcome<String>> {
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
pub async fn cycles_exactly_once(local: &str, secret: &Path, workers: u32, cycles: u64) -> wodi::Stats {
    let cfg = config(local, secret, test_worker(), workers);
    let mut master = Master::init(cfg, &"hello".to_string()).await.expect("init");
    for c in 0..cycles {
        let cycle = CycleId(c);
        master.begin_cycle(cycle, &format!("b{c}")).unwrap();
        for s in 0..31 {
            master.send_work(StepId(s), &format!("d{s}")).unwrap();
        }
        let mut seen: BTreeMap<u64, u32> = BTreeMap::new();
        for o in collect(&mut master, 31).await {
            match o {
                StepOutcome::Done(step, r) => {
                    assert_eq!(r, format!("hello|{cycle}:b{c}|{step}|d{}", step.0));
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cycles_of_31_steps_return_every_result_once() {
    let pool = pool("wodi-cycles", 3);
    let stats = cycles_exactly_once(&pool.locals[0].app_addr, &pool.secret_path, 3, 4).await;
    assert_eq!(stats.steps_delivered, 4 * 31);
    assert_eq!(stats.hosts_added, 3);
    assert_eq!(stats.hosts_lost, 0);
    assert_eq!(stats.timeline.len(), 3);
    assert!(stats.occupancy_s > 0.0);
    let json = serde_json::to_string(&stats).unwrap();
    assert!(json.contains("\"efficiency\""));
}
