//! A master with two classes end to end (issue 15 item 6): a real pool
//! (`carmi_tests::Pool`) of a fast machine (`Speed = 2.0`) and a slow one
//! (`0.5`; the test worker sleeps `work / Speed`), one class for each. The
//! classes run different worker commands: the fast class the test worker
//! with an argument of its own, the slow class a copy of it under another
//! name. Their declared speeds place the long step on the fast class's
//! worker, and every step is answered once, each by the command of the
//! class whose host computed it.

mod common;

use std::collections::BTreeMap;

use carmi_tests::Pool;
use common::{collect, config, test_worker};
use wodi::master::{Master, StepOutcome};
use wodi::proto::ClassSpec;
use wodi::speed::SpeedSource;
use wodi::{CycleId, StepId};

/// Work of each step, ms on a speed-1 host: four short ones, then the long one.
const STEPS: [u64; 5] = [100, 100, 100, 100, 800];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_classes_run_their_own_worker_commands_and_the_long_step_runs_on_the_fast_one() {
    let machines = vec![
        vec!["Fast=0".to_string(), "Speed=0.5".into()],
        vec!["Fast=1".to_string(), "Speed=2.0".into()],
    ];
    let pool = Pool::start("wodi-classes", 1, &machines);
    let copy = pool.dir.join("slow-worker");
    std::fs::copy(test_worker(), &copy).expect("copy the test worker");
    let mut cfg = config(
        &pool.locals[0].app_addr,
        &pool.secret_path,
        test_worker(),
        1,
    );
    cfg.classes = vec![
        ClassSpec {
            speed: Some(2.0),
            args: Some(vec!["--class=fast".into()]),
            ..ClassSpec::new("fast", "Fast == 1", 1)
        },
        ClassSpec {
            speed: Some(0.5),
            executable: Some(copy.to_string_lossy().into_owned()),
            ..ClassSpec::new("slow", "Fast == 0", 1)
        },
    ];
    cfg.speed = SpeedSource::Class;
    cfg.refine_speed = false;
    cfg.learn_from_wall = true;
    // Both hosts for the whole run: a host given back in a cycle's tail
    // and granted again would blur which class computed what.
    cfg.policies.release_idle = false;
    cfg.policies.stragglers = false;
    let mut master = Master::init(cfg, &"i".to_string()).await.expect("init");
    let mut long_ran_on = Vec::new();
    let mut commands = BTreeMap::new();
    for c in 0..3 {
        master.begin_cycle(CycleId(c), &"b").unwrap();
        for (s, ms) in STEPS.iter().enumerate() {
            master
                .send_work(StepId(s as u64), &format!("who {ms}"))
                .unwrap();
        }
        let mut seen = BTreeMap::new();
        for o in collect(&mut master, STEPS.len()).await {
            match o {
                StepOutcome::Done(step, who) => {
                    *seen.entry(step.0).or_insert(0) += 1;
                    *commands.entry(who.clone()).or_insert(0) += 1;
                    if step.0 == STEPS.len() as u64 - 1 {
                        long_ran_on.push(who);
                    }
                }
                StepOutcome::Failed(step, why) => panic!("{step} failed: {why}"),
            }
        }
        assert_eq!(
            seen,
            (0..STEPS.len() as u64).map(|s| (s, 1)).collect(),
            "cycle {c}"
        );
        master.end_cycle(CycleId(c), &()).unwrap();
    }
    let stats = master.complete().await.expect("complete");
    // Only the two classes' commands ran, and both did.
    let names: Vec<&str> = commands.keys().map(String::as_str).collect();
    assert_eq!(
        names,
        vec!["slow-worker", "wodi-test-worker --class=fast"],
        "{commands:?}"
    );
    // From the second cycle on the history knows the long step: it goes to
    // the fast class (the first cycle's order is arrival, by the step ids).
    assert_eq!(
        long_ran_on[1..],
        [
            "wodi-test-worker --class=fast",
            "wodi-test-worker --class=fast"
        ],
        "{long_ran_on:?}"
    );
    assert_eq!(stats.steps_delivered, 3 * STEPS.len() as u64);
}
