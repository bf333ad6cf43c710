//! A takeover of the pool's manager under a working pool (issue 35): two
//! managers and three machines, each daemon on a host of its own (network
//! namespaces, `carmi_tests::Managers::start_net`). While hand-submitted
//! jobs run and a WoDi master is in the middle of a cycle, the active
//! manager is killed with SIGKILL and its state directory deleted. The
//! standby is active within 10 s; `carmi` given the list of managers
//! answers throughout; every acknowledged submit, hold and removal is
//! there; the running job keeps running (never started twice) and
//! finishes; the WoDi run gets every step's result exactly once, in that
//! cycle and in the next. To the master, its server and workers it is a
//! restart of the global RM (requests held and resent).
//!
//! Needs root and `ip`; elsewhere it prints its SKIP line (and fails under
//! `CARMI_CI_REQUIRE_SERVICES=1`, as in CI, which runs as root).
//! `carmi-tests`' `standby.rs` runs the same takeover on loopback.

mod common;

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use carmi_tests::{Managers, PoolOptions, gated_starts, netns, state_of};
use common::{collect, config, test_worker};
use wodi::master::{Master, StepOutcome};
use wodi::{CycleId, StepId};

const STEPS: u64 = 31;
/// Bounds a broken run; the takeover itself must take less than 10 s.
const LIMIT: Duration = Duration::from_secs(120);

/// Checks that `collected` holds every step's result of `cycle` exactly
/// once, each computed from the init, the cycle's data and the step's
/// `data` (`{s}` standing for the step's number).
fn exactly_once(collected: Vec<StepOutcome<String>>, cycle: CycleId, data: &str, m: &Managers) {
    let mut seen: BTreeMap<u64, u32> = BTreeMap::new();
    for o in collected {
        match o {
            StepOutcome::Done(step, r) => {
                let sent = data.replace("{s}", &step.0.to_string());
                let batch = format!("b{}", cycle.0);
                assert_eq!(r, format!("hello|{cycle}:{batch}|{step}|{sent}"));
                *seen.entry(step.0).or_default() += 1;
            }
            StepOutcome::Failed(step, why) => panic!("{step} failed: {why}\n{}", m.logs()),
        }
    }
    let expected: BTreeMap<u64, u32> = (0..STEPS).map(|s| (s, 1)).collect();
    assert_eq!(seen, expected, "step ids received in {cycle}");
}

/// Begins `cycle` with [`STEPS`] steps, each sent `data`.
fn begin(master: &mut Master, cycle: CycleId, data: &str) {
    master.begin_cycle(cycle, &format!("b{}", cycle.0)).unwrap();
    for s in 0..STEPS {
        let sent = data.replace("{s}", &s.to_string());
        master.send_work(StepId(s), &sent).unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_takeover_under_running_jobs_and_a_wodi_run_loses_nothing() {
    if !netns::ready("standby takeover in namespaces") {
        return;
    }
    let mut m = Managers::start_net("wodi-standby", 2, 2, 3, PoolOptions::default());
    m.pool.wait_registered();
    m.wait_in_sync();
    let dir = m.pool.dir.join("jobs");
    std::fs::create_dir_all(&dir).unwrap();
    let running = m.pool.submit_gated(&dir, "r", "");
    m.pool
        .wait_until("the job runs", LIMIT, || gated_starts(&dir, "r") == 1);
    // Free slots would start these two before the hold and the removal.
    let nowhere = "requirements = false\n";
    let held = m.pool.submit_gated(&dir, "h", nowhere);
    m.pool
        .run_ok(m.pool.carmi().args(["hold", &held.to_string()]));
    let removed = m.pool.submit_gated(&dir, "x", nowhere);
    m.pool
        .run_ok(m.pool.carmi().args(["rm", &removed.to_string()]));

    let local = m.pool.locals[0].app_addr.clone();
    let cfg = config(&local, &m.pool.secret_path, test_worker(), 2);
    let mut master = Master::init(cfg, &"hello".to_string()).await.expect("init");
    let first = CycleId(0);
    begin(&mut master, first, "sleep 200");
    let mut outcomes = collect(&mut master, 4).await;

    // The active manager and its disk are lost mid-cycle.
    m.kill(0);
    std::fs::remove_dir_all(m.state_dir(0)).unwrap();
    let lost = Instant::now();
    // `carmi` given the list waits for, and then follows, the new active one.
    let q = m.pool.queue_states();
    assert!(
        q.is_some(),
        "carmi q failed during the takeover\n{}",
        m.logs()
    );
    assert!(
        m.becomes_active(1, Duration::from_secs(10).saturating_sub(lost.elapsed())),
        "the standby was not active within 10 s of the kill\n{}",
        m.logs()
    );
    outcomes.extend(collect(&mut master, (STEPS - 4) as usize).await);
    exactly_once(outcomes, first, "sleep 200", &m);
    master.end_cycle(first, &()).unwrap();

    let pool = &m.pool;
    pool.wait_until("the queue as acknowledged", LIMIT, || {
        let q = pool.queue_states().unwrap_or_default();
        state_of(&q, running) == Some("running")
            && state_of(&q, held) == Some("held")
            && state_of(&q, removed).is_none()
    });
    let history = pool.wait_history_json(&removed.to_string(), LIMIT);
    assert_eq!(
        history.len(),
        1,
        "the removal is in the history: {history:?}"
    );

    // A cycle after the takeover, on the new active manager's pool.
    let next = CycleId(1);
    begin(&mut master, next, "d{s}");
    exactly_once(collect(&mut master, STEPS as usize).await, next, "d{s}", &m);
    master.end_cycle(next, &()).unwrap();
    master.complete().await.expect("complete");

    std::fs::write(dir.join("go"), "").unwrap();
    let out = pool.wait_job(&dir, &running.to_string(), 120);
    pool.assert_exit(&out, 0);
    assert_eq!(gated_starts(&dir, "r"), 1, "started once");
    assert_eq!(gated_starts(&dir, "h") + gated_starts(&dir, "x"), 0);
    let status = m.status();
    assert_eq!(status[0]["role"], "unreachable", "{status:?}");
    assert_eq!(status[1]["role"], "active", "{status:?}");
}
