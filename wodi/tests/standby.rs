//! A WoDi run across a takeover of the pool's manager (issue 35): two
//! managers, one active and one standing by (`carmi_tests::Managers`); in
//! the middle of a cycle the active one is killed with SIGKILL and its state
//! directory deleted. The standby takes over; to the master, its server and
//! workers it is a restart of the global RM (requests held and resent), and
//! every step's result comes back exactly once, in that cycle and in the
//! next.

mod common;

use std::collections::BTreeMap;

use carmi_tests::{Managers, PoolOptions};
use common::{collect, config, test_worker};
use wodi::master::{Master, StepOutcome};
use wodi::{CycleId, StepId};

const STEPS: u64 = 31;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_result_comes_back_once_across_a_takeover() {
    let mut m = Managers::start(
        "wodi-standby",
        2,
        1,
        &vec![Vec::new(); 3],
        PoolOptions::default(),
    );
    m.pool.wait_registered();
    m.wait_in_sync();
    let local = m.pool.locals[0].app_addr.clone();
    let cfg = config(&local, &m.pool.secret_path, test_worker(), 2);
    let mut master = Master::init(cfg, &"hello".to_string()).await.expect("init");
    let cycle = CycleId(0);
    master.begin_cycle(cycle, &"b0".to_string()).unwrap();
    for s in 0..STEPS {
        master
            .send_work(StepId(s), &"sleep 200".to_string())
            .unwrap();
    }
    let mut outcomes = collect(&mut master, 4).await;
    m.kill(0);
    std::fs::remove_dir_all(m.state_dir(0)).unwrap();
    outcomes.extend(collect(&mut master, (STEPS - 4) as usize).await);
    let mut seen: BTreeMap<u64, u32> = BTreeMap::new();
    for o in outcomes {
        match o {
            StepOutcome::Done(step, r) => {
                assert_eq!(r, format!("hello|{cycle}:b0|{step}|sleep 200"));
                *seen.entry(step.0).or_default() += 1;
            }
            StepOutcome::Failed(step, why) => panic!("{step} failed: {why}\n{}", m.logs()),
        }
    }
    let expected: BTreeMap<u64, u32> = (0..STEPS).map(|s| (s, 1)).collect();
    assert_eq!(seen, expected, "step ids received");
    master.end_cycle(cycle, &()).unwrap();
    // A cycle after the takeover, on the new active manager's pool.
    assert!(m.becomes_active(1, std::time::Duration::from_secs(60)));
    let next = CycleId(1);
    master.begin_cycle(next, &"b1".to_string()).unwrap();
    for s in 0..STEPS {
        master.send_work(StepId(s), &format!("d{s}")).unwrap();
    }
    let mut again: BTreeMap<u64, u32> = BTreeMap::new();
    for o in collect(&mut master, STEPS as usize).await {
        match o {
            StepOutcome::Done(step, r) => {
                assert_eq!(r, format!("hello|{next}:b1|{step}|d{}", step.0));
                *again.entry(step.0).or_default() += 1;
            }
            StepOutcome::Failed(step, why) => panic!("{step} failed: {why}\n{}", m.logs()),
        }
    }
    assert_eq!(again, expected, "step ids received after the takeover");
    master.end_cycle(next, &()).unwrap();
    master.complete().await.expect("complete");
    let status = m.status();
    assert_eq!(status[1]["role"], "active", "{status:?}");
}
