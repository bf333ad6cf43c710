//! A master with two classes end to end (issue 15 item 6): a real pool
//! (`carmi_tests::Pool`) of a fast machine (`Speed = 2.0`) and a slow one
//! (`0.5`; the test worker sleeps `work / Speed`), one class for each. The
//! classes run different worker commands: the fast class the test worker
//! with an argument of its own, the slow class a copy of it under another
//! name. Their declared speeds place the long step on the fast class's
//! worker, and every step is answered once, each by the command of the
//! class whose host computed it. With the fewest-hosts rule, the slow
//! class's hosts are the ones given back.

mod common;

use std::collections::BTreeMap;
use std::time::Duration;

use carmi_tests::Pool;
use common::{collect, config, test_worker};
use wodi::master::{Master, StepOutcome};
use wodi::proto::ClassSpec;
use wodi::speed::SpeedSource;
use wodi::{CycleId, StepId};

/// Work of each step, ms on a speed-1 host: four short ones, then the long one.
const STEPS: [u64; 5] = [100, 100, 100, 100, 800];

/// The tests take turns (see e2e.rs: several pools at once on a loaded
/// 2-core machine make local RMs miss heartbeats).
async fn pool(
    name: &str,
    machines: &[Vec<String>],
) -> (tokio::sync::MutexGuard<'static, ()>, Pool) {
    static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());
    let turn = SERIAL.lock().await;
    (turn, Pool::start(name, 1, machines))
}

/// A machine of the fast kind or the slow one.
fn machine(fast: bool) -> Vec<String> {
    let speed = if fast { "Speed=2.0" } else { "Speed=0.5" };
    vec![format!("Fast={}", u8::from(fast)), speed.into()]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_classes_run_their_own_worker_commands_and_the_long_step_runs_on_the_fast_one() {
    let (_turn, pool) = pool("wodi-classes", &[machine(false), machine(true)]).await;
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fewest_hosts_across_two_classes_gives_back_the_slow_classs_hosts() {
    let machines = [machine(false), machine(false), machine(true), machine(true)];
    let (_turn, pool) = pool("wodi-classes-fewest", &machines).await;
    let mut cfg = config(
        &pool.locals[0].app_addr,
        &pool.secret_path,
        test_worker(),
        2,
    );
    cfg.classes = vec![
        ClassSpec {
            speed: Some(0.5),
            args: Some(vec!["--class=slow".into()]),
            ..ClassSpec::new("slow", "Fast == 0", 2)
        },
        ClassSpec {
            speed: Some(2.0),
            args: Some(vec!["--class=fast".into()]),
            ..ClassSpec::new("fast", "Fast == 1", 2)
        },
    ];
    cfg.speed = SpeedSource::Class;
    cfg.refine_speed = false;
    cfg.learn_from_wall = true;
    cfg.policies.fewest_hosts = Some(0.1);
    cfg.policies.hysteresis = 0;
    let mut master = Master::init(cfg, &"f".to_string()).await.expect("init");
    // One step of 800 ms of work and seven of 20 ms: 400 ms on a fast host
    // is the best cycle, and the two fast hosts reach it (400 | 7 x 10 ms).
    let data = |s: u64| format!("who {}", if s == 0 { 800 } else { 20 });
    let mut late = BTreeMap::new();
    for c in 0..4 {
        let cycle = CycleId(c);
        master.begin_cycle(cycle, &format!("b{c}")).unwrap();
        for s in 0..8 {
            master.send_work(StepId(s), &data(s)).unwrap();
        }
        for o in collect(&mut master, 8).await {
            match o {
                StepOutcome::Done(_, who) if c >= 2 => *late.entry(who).or_insert(0) += 1,
                StepOutcome::Done(..) => {}
                StepOutcome::Failed(step, why) => panic!("{step} failed: {why}"),
            }
        }
        master.end_cycle(cycle, &()).unwrap();
    }
    // The server's reports catch up within a second.
    let mut status = master.status();
    for _ in 0..40 {
        if status.wanted == 2 && status.hosts <= 2 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
        status = master.status();
    }
    assert_eq!(status.wanted, 2, "{status:?}");
    assert!(status.hosts <= 2, "surplus hosts went back: {status:?}");
    // Once the rule held, only the fast class computed.
    let who: Vec<&str> = late.keys().map(String::as_str).collect();
    assert_eq!(who, vec!["wodi-test-worker --class=fast"], "{late:?}");
    let stats = master.complete().await.expect("complete");
    assert_eq!(stats.steps_delivered, 32);
}
