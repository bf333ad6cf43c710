//! [`HostSpeeds`] driving the real scheduler core with virtual time: each
//! source sets the speed the core places steps by, and observed step times
//! correct a wrong one.

use std::time::Duration;

use bytes::Bytes;
use carmi_proto::ids::HostId;

use super::*;
use crate::ids::{StepId, WorkerId};
use crate::order::LongestFirst;
use crate::sched::{ArrivalOrder, Output, Sched, SchedConfig, Ticket, Verdict};

const T0: Duration = Duration::ZERO;

fn core() -> Sched {
    Sched::new(SchedConfig::default(), Box::new(LongestFirst))
}

/// Grants hosts 0..ads.len() to class `c` with these machine ads; returns
/// each host's worker (joined unless the source benchmarks it first).
fn grant(s: &mut Sched, hs: &mut HostSpeeds, class: &str, ads: &[&str]) -> Vec<WorkerId> {
    s.set_class(class, ads.len() as u32, T0);
    let mut workers = Vec::new();
    for (i, ad) in ads.iter().enumerate() {
        let host = HostId(i as u64);
        assert!(!hs.host_added(s, host, &format!("slot1@m{i}"), class, ad, T0));
        let w = std::iter::from_fn(|| s.poll_output())
            .find_map(|o| match o {
                Output::Spawn { worker, .. } => Some(worker),
                _ => None,
            })
            .expect("a worker is spawned on each host");
        if !hs.worker_connected(w, host, T0) {
            s.worker_joined(w, T0);
        }
        workers.push(w);
    }
    workers
}

fn speeds(s: &Sched, n: u64) -> Vec<Option<f64>> {
    (0..n).map(|h| s.host_speed(HostId(h))).collect()
}

#[test]
fn class_speeds_reach_the_core() {
    let mut s = core();
    let mut hs = HostSpeeds::new(SpeedSource::Class, false);
    hs.set_class_speed("fast", Some(2.0));
    grant(&mut s, &mut hs, "fast", &["", ""]);
    assert_eq!(speeds(&s, 2), vec![Some(2.0), Some(2.0)]);
    // A class without a speed counts as 1.
    let mut s = core();
    let mut hs = HostSpeeds::new(SpeedSource::Class, false);
    grant(&mut s, &mut hs, "plain", &[""]);
    assert_eq!(speeds(&s, 1), vec![Some(1.0)]);
}

#[test]
fn machine_ad_scores_reach_the_core_relative_to_a_reference_or_the_median() {
    let ads = ["[ Mips = 6000 ]", "[ Mips = 1500 ]", "[ Mips = 3000 ]"];
    let mut s = core();
    let mut hs = HostSpeeds::new(
        SpeedSource::MachineAd {
            attribute: "Mips".into(),
            reference: Some(3000.0),
        },
        false,
    );
    grant(&mut s, &mut hs, "c", &ads);
    assert_eq!(speeds(&s, 3), vec![Some(2.0), Some(0.5), Some(1.0)]);

    let mut s = core();
    let mut hs = HostSpeeds::new(SpeedSource::mips(), false);
    grant(&mut s, &mut hs, "c", &ads);
    assert_eq!(speeds(&s, 3), vec![Some(2.0), Some(0.5), Some(1.0)]);

    // An empty ad asks for the host's info; its answer sets the speed.
    let mut s = core();
    let mut hs = HostSpeeds::new(SpeedSource::mips(), false);
    s.set_class("c", 1, T0);
    assert!(hs.host_added(&mut s, HostId(0), "slot1@m0", "c", "", T0));
    assert_eq!(s.host_speed(HostId(0)), None);
    hs.host_ad(&mut s, HostId(0), "[ Mips = 3000 ]");
    assert_eq!(s.host_speed(HostId(0)), Some(1.0));
}

#[test]
fn the_benchmark_runs_before_any_step_and_sets_the_speed() {
    let mut s = core();
    let mut hs = HostSpeeds::new(
        SpeedSource::Benchmark {
            reference_s: Some(0.5),
        },
        false,
    );
    hs.set_benchmark(Bytes::from_static(b"bench"));
    let w = grant(&mut s, &mut hs, "c", &["", ""]);
    assert!(hs.benchmarking(w[0]) && hs.benchmarking(w[1]));
    // No worker has joined the core yet: a step waits.
    s.submit(StepId(0), None, T0);
    s.dispatch(T0);
    assert!(std::iter::from_fn(|| s.poll_output()).all(|o| !matches!(o, Output::Assign { .. })));
    let at = Duration::from_millis(300);
    assert!(hs.benchmark_done(&mut s, w[0], Some(Duration::from_millis(250)), at));
    s.worker_joined(w[0], at);
    assert!(hs.benchmark_done(&mut s, w[1], Some(Duration::from_secs(1)), at));
    s.worker_joined(w[1], at);
    assert_eq!(speeds(&s, 2), vec![Some(2.0), Some(0.5)]);
    assert_eq!(hs.benchmarks, 2);
    assert_eq!(hs.benchmark_time, 2 * at);
    // A worker whose benchmark fails still works, at an unknown speed.
    s.set_class("c", 3, at);
    assert!(!hs.host_added(&mut s, HostId(2), "slot1@m2", "c", "", at));
    let w3 = std::iter::from_fn(|| s.poll_output())
        .find_map(|o| match o {
            Output::Spawn { worker, .. } => Some(worker),
            _ => None,
        })
        .expect("a worker on the third host");
    assert!(hs.worker_connected(w3, HostId(2), at));
    assert!(hs.benchmark_done(&mut s, w3, None, at));
    assert_eq!(s.host_speed(HostId(2)), None);
    assert_eq!(hs.benchmarks, 3);
    // A second answer from the same worker is not a benchmark any more.
    assert!(!hs.benchmark_done(&mut s, w[0], Some(Duration::from_secs(9)), at));
    assert_eq!(s.host_speed(HostId(0)), Some(2.0));
}

/// Gives `step` to whichever worker the core assigns and answers it after
/// `took`, passing the result through [`HostSpeeds`] as the server does.
fn run_step(
    s: &mut Sched,
    hs: &mut HostSpeeds,
    step: u64,
    now: &mut Duration,
    took: &dyn Fn(WorkerId) -> f64,
) -> WorkerId {
    let t: Ticket = s.submit(StepId(step), None, *now);
    s.dispatch(*now);
    let w = std::iter::from_fn(|| s.poll_output())
        .find_map(|o| match o {
            Output::Assign { worker, ticket, .. } if ticket == t => Some(worker),
            _ => None,
        })
        .expect("the step is assigned");
    let d = Duration::from_secs_f64(took(w));
    *now += d;
    if let Some(exp) = hs.expect(s, w, StepId(step)) {
        hs.observe_result(s, exp, d);
    }
    assert_eq!(s.result(w, t, d, d, *now), Verdict::Deliver);
    w
}

#[test]
fn observed_times_correct_a_wrong_speed() {
    // Arrival order, so the test chooses where each step runs.
    let mut s = Sched::new(SchedConfig::default(), Box::new(ArrivalOrder));
    // The master says both hosts are alike; host 1 is really twice as fast.
    let mut hs = HostSpeeds::new(SpeedSource::Class, true);
    let w = grant(&mut s, &mut hs, "c", &["", ""]);
    let true_speed = |x: WorkerId| if x == w[1] { 2.0 } else { 1.0 };
    let mut now = T0;
    // Step 7 (1 s of work) runs on worker 0 first and builds history there.
    let first = run_step(&mut s, &mut hs, 7, &mut now, &|x| 1.0 / true_speed(x));
    assert_eq!(first, w[0]);
    assert_eq!(s.host_speed(HostId(1)), Some(1.0));
    // Then on worker 1 (worker 0 kept busy), several cycles.
    for _ in 0..6 {
        let busy = s.submit(StepId(99), None, now);
        s.dispatch(now);
        let _ = std::iter::from_fn(|| s.poll_output()).count();
        let on = run_step(&mut s, &mut hs, 7, &mut now, &|x| 1.0 / true_speed(x));
        assert_eq!(on, w[1]);
        let v = s.result(w[0], busy, Duration::ZERO, Duration::ZERO, now);
        assert_eq!(v, Verdict::Deliver);
    }
    let learned = s.host_speed(HostId(1)).unwrap();
    assert!(
        (learned - 2.0).abs() < 0.15,
        "host 1's speed became {learned}"
    );
    assert!((s.host_speed(HostId(0)).unwrap() - 1.0).abs() < 1e-9);
    // The history stays in speed-1 seconds: about 1 s of work.
    let est = s.history().estimate(&StepId(7)).unwrap();
    assert!((est - 1.0).abs() < 0.3, "estimate {est}");
}

#[test]
fn the_history_learns_wall_time_when_asked() {
    for (wall_clock, expected) in [(false, 0.1), (true, 2.0)] {
        let cfg = SchedConfig {
            learn_from_wall: wall_clock,
            ..SchedConfig::default()
        };
        let mut s = Sched::new(cfg, Box::new(ArrivalOrder));
        let mut hs = HostSpeeds::new(SpeedSource::Unknown, false);
        let w = grant(&mut s, &mut hs, "c", &[""]);
        let t = s.submit(StepId(1), None, T0);
        s.dispatch(T0);
        let cpu = Duration::from_millis(100);
        let wall = Duration::from_secs(2);
        assert_eq!(s.result(w[0], t, cpu, wall, wall), Verdict::Deliver);
        assert_eq!(s.history().estimate(&StepId(1)), Some(expected));
    }
}

/// The first spawned worker among the core's outputs.
fn spawned(s: &mut Sched) -> WorkerId {
    std::iter::from_fn(|| s.poll_output())
        .find_map(|o| match o {
            Output::Spawn { worker, .. } => Some(worker),
            _ => None,
        })
        .expect("a worker is spawned")
}

#[test]
fn a_host_given_back_and_granted_again_keeps_what_the_run_learned() {
    // Observed times taught host 0 that it is twice as fast as it was told.
    let mut s = Sched::new(SchedConfig::default(), Box::new(ArrivalOrder));
    let mut hs = HostSpeeds::new(SpeedSource::Class, true);
    let w = grant(&mut s, &mut hs, "c", &[""]);
    s.history_mut().observe(StepId(7), 1.0, 1.0);
    let mut now = T0;
    for _ in 0..3 {
        run_step(&mut s, &mut hs, 7, &mut now, &|_| 0.5);
    }
    let learned = s.host_speed(HostId(0)).expect("a speed was learned");
    assert!(learned > 1.5, "learned {learned}");
    // Given back (the run shrank), then granted again: under its old id,
    // and once more under a new one, it starts from what was learned.
    s.set_class("c", 0, now);
    let _ = std::iter::from_fn(|| s.poll_output()).count();
    hs.host_gone(HostId(0));
    assert_eq!(s.find_worker_host(w[0]), None);
    for id in [HostId(0), HostId(7)] {
        s.set_class("c", 1, now);
        assert!(!hs.host_added(&mut s, id, "slot1@m0", "c", "", now));
        assert_eq!(s.host_speed(id), Some(learned));
        s.set_class("c", 0, now);
        let _ = std::iter::from_fn(|| s.poll_output()).count();
        hs.host_gone(id);
    }
    // Another machine starts from its source's speed.
    s.set_class("c", 1, now);
    assert!(!hs.host_added(&mut s, HostId(8), "slot1@m1", "c", "", now));
    assert_eq!(s.host_speed(HostId(8)), Some(1.0));
}

#[test]
fn a_host_granted_again_is_not_benchmarked_again() {
    let mut s = core();
    let mut hs = HostSpeeds::new(
        SpeedSource::Benchmark {
            reference_s: Some(0.5),
        },
        false,
    );
    hs.set_benchmark(Bytes::from_static(b"bench"));
    let w = grant(&mut s, &mut hs, "c", &[""]);
    assert!(hs.benchmark_done(&mut s, w[0], Some(Duration::from_millis(250)), T0));
    s.worker_joined(w[0], T0);
    assert_eq!(s.host_speed(HostId(0)), Some(2.0));
    s.set_class("c", 0, T0);
    let _ = std::iter::from_fn(|| s.poll_output()).count();
    hs.host_gone(HostId(0));
    s.set_class("c", 1, T0);
    assert!(!hs.host_added(&mut s, HostId(0), "slot1@m0", "c", "", T0));
    let again = spawned(&mut s);
    assert!(!hs.worker_connected(again, HostId(0), T0));
    assert_eq!(s.host_speed(HostId(0)), Some(2.0));
    assert_eq!(hs.benchmarks, 1);
}
