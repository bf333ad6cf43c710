//! Fast abort end to end: a real pool (`carmi_tests::Pool`) of two machines
//! that look alike to WoDi (no speed is known) while one of them runs the
//! test worker's `work` steps twenty times slower (its ad says `Speed =
//! 0.05`). The slow host's steps overrun their estimate by far, so fast abort
//! retires it; the server has CARMI exclude it from the class before giving
//! it back, so that the request for its replacement, which stays pending
//! since the pool has no other machine, never takes it again.

mod common;

use std::collections::BTreeMap;
use std::time::Duration;

use carmi_tests::Pool;
use common::{collect, config, test_worker};
use wodi::checkpoint::{CHECKPOINT_FORMAT, Checkpoint, SavedEstimate};
use wodi::master::{Master, StepOutcome};
use wodi::proto::Policies;
use wodi::speed::SpeedSource;
use wodi::{CycleId, StepId};

/// Steps per cycle, each 100 ms of work on a speed-1 host.
const STEPS: u64 = 8;
const WORK_MS: u64 = 100;
/// Cycles after which the test gives up waiting for the slow host's retirement.
const MAX_CYCLES: u64 = 20;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_host_retired_by_fast_abort_is_never_granted_to_the_run_again() {
    let pool = Pool::start("wodi-abort", 1, &[Vec::new(), vec!["Speed=0.05".into()]]);
    let mut cfg = config(
        &pool.locals[0].app_addr,
        &pool.secret_path,
        test_worker(),
        2,
    );
    // Fast abort alone: released idle hosts would come and go, and copies
    // of the slow host's steps would hide its strikes.
    cfg.policies = Policies {
        fast_abort: Some(5.0),
        ..Policies::default()
    };
    cfg.speed = SpeedSource::Unknown;
    cfg.refine_speed = false;
    cfg.learn_from_wall = true;
    // Every step's estimate from the start (as a restarted master has it),
    // so that the first step on the slow host is already overdue: 100 ms
    // allowed 500 ms there, where it takes 2 s.
    let checkpoint = pool.dir.join("abort.checkpoint");
    Checkpoint {
        format: CHECKPOINT_FORMAT,
        cycle: CycleId(0),
        state: b"null".to_vec(),
        history: (0..STEPS)
            .map(|s| SavedEstimate {
                step: StepId(s),
                mean: WORK_MS as f64 / 1000.0,
                samples: 10,
            })
            .collect(),
    }
    .save(&checkpoint)
    .expect("write the checkpoint");
    cfg.checkpoint = Some(checkpoint);
    let mut master = Master::init(cfg, &"a".to_string()).await.expect("init");
    // The slow host takes a step in the first cycle (a strike when it is
    // overdue) and another once it answers (the second strike): it is
    // retired within the first few cycles (the run then holds one host and
    // wants two), and the run goes on without it for two more cycles, still
    // asking for a second host.
    let mut retired_after = None;
    let mut cycles = 0;
    for c in 0..MAX_CYCLES {
        let cycle = CycleId(c);
        master.begin_cycle(cycle, &format!("b{c}")).unwrap();
        for s in 0..STEPS {
            master
                .send_work(StepId(s), &format!("work {WORK_MS}"))
                .unwrap();
        }
        let mut seen: BTreeMap<u64, u32> = BTreeMap::new();
        for o in collect(&mut master, STEPS as usize).await {
            match o {
                StepOutcome::Done(step, _) => *seen.entry(step.0).or_default() += 1,
                StepOutcome::Failed(step, why) => panic!("{step} failed: {why}"),
            }
        }
        assert_eq!(seen, (0..STEPS).map(|s| (s, 1)).collect(), "cycle {c}");
        master.end_cycle(cycle, &()).unwrap();
        cycles += 1;
        let status = master.status();
        if retired_after.is_none() && (status.wanted, status.hosts) == (2, 1) {
            retired_after = Some(c);
        }
        if retired_after.is_some_and(|r| c >= r + 2) {
            break;
        }
    }
    assert!(
        retired_after.is_some(),
        "no host retired in {cycles} cycles: {:?}",
        master.status()
    );
    // The server's reports catch up within a second.
    let mut status = master.status();
    for _ in 0..40 {
        if status.wanted == 2 && status.hosts == 1 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
        status = master.status();
    }
    assert_eq!(
        (status.wanted, status.hosts),
        (2, 1),
        "the run still asks for the host it retired: {status:?}"
    );
    let stats = master.complete().await.expect("complete");
    assert_eq!(stats.steps_delivered, cycles * STEPS);
    assert_eq!(stats.hosts.retired, 1, "{}", pool.logs());
    // Without the exclusion the pool grants the free slow machine to the
    // pending request again and again, and the core gives it back each time.
    assert_eq!(
        stats.hosts.retired_offers, 0,
        "the retired host was granted again"
    );
    assert_eq!(stats.hosts.added, 2, "no other host was granted");
}
