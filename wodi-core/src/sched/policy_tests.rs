//! Each policy's decision, driven with virtual time.

use std::time::Duration;

use carmi_proto::ids::HostId;

use crate::ids::{StepId, WorkerId};
use crate::sched::{ArrivalOrder, Output, Sched, SchedConfig, Ticket, Verdict};
use crate::stats::RunOutcome;

const SEC: Duration = Duration::from_secs(1);

/// A core with one joined worker per speed (hosts 0, 1, ...).
fn core(cfg: SchedConfig, speeds: &[f64]) -> (Sched, Vec<WorkerId>) {
    let mut s = Sched::new(cfg, Box::new(ArrivalOrder));
    s.set_class("c", speeds.len() as u32, Duration::ZERO);
    let mut workers = Vec::new();
    for (i, &speed) in speeds.iter().enumerate() {
        s.host_added(HostId(i as u64), "c", Some(speed), Duration::ZERO);
    }
    while let Some(o) = s.poll_output() {
        if let Output::Spawn { worker, .. } = o {
            s.worker_joined(worker, Duration::ZERO);
            workers.push(worker);
        }
    }
    drain(&mut s);
    (s, workers)
}

/// Adds one more joined worker on `host` (a class grown by one).
fn grow(s: &mut Sched, host: u64, now: Duration) -> WorkerId {
    s.set_class("c", host as u32 + 1, now);
    s.host_added(HostId(host), "c", Some(1.0), now);
    let w = drain(s)
        .into_iter()
        .find_map(|o| match o {
            Output::Spawn { worker, .. } => Some(worker),
            _ => None,
        })
        .expect("a worker is spawned on the new host");
    s.worker_joined(w, now);
    drain(s);
    w
}

fn drain(s: &mut Sched) -> Vec<Output> {
    s.sanity_check();
    std::iter::from_fn(|| s.poll_output()).collect()
}

/// Teaches the core that step `id` takes `secs` on a speed-1 host, using `w`
/// (of speed `speed`) alone.
fn learn(s: &mut Sched, w: WorkerId, speed: f64, id: u64, secs: f64, now: &mut Duration) {
    s.submit(StepId(id), None, *now);
    s.dispatch(*now);
    let t = assigned(&drain(s), w).expect("the step went to the worker");
    let took = Duration::from_secs_f64(secs / speed);
    *now += took;
    assert_eq!(s.result(w, t, took, took, *now), Verdict::Deliver);
    drain(s);
}

fn assigned(outs: &[Output], w: WorkerId) -> Option<Ticket> {
    outs.iter().find_map(|o| match o {
        Output::Assign { ticket, worker, .. } if *worker == w => Some(*ticket),
        _ => None,
    })
}

fn released(outs: &[Output]) -> Vec<HostId> {
    outs.iter()
        .filter_map(|o| match o {
            Output::ReleaseHost { host } => Some(*host),
            _ => None,
        })
        .collect()
}

fn requested(outs: &[Output]) -> u32 {
    outs.iter()
        .map(|o| match o {
            Output::RequestHosts { count, .. } => *count,
            _ => 0,
        })
        .sum()
}

fn release_idle() -> SchedConfig {
    SchedConfig {
        release_idle: true,
        reacquire: 10 * SEC,
        ..SchedConfig::default()
    }
}

#[test]
fn an_idle_host_in_a_long_tail_goes_back_and_is_asked_for_at_the_next_cycle() {
    // History is learnt on one host (a second would go back while idle).
    let (mut s, mut w) = core(release_idle(), &[1.0]);
    let mut now = Duration::ZERO;
    learn(&mut s, w[0], 1.0, 1, 100.0, &mut now);
    learn(&mut s, w[0], 1.0, 2, 5.0, &mut now);
    w.push(grow(&mut s, 1, now));
    // A cycle of a long and a short step: when the short one ends, the long
    // one has 95 s to go, more than getting a host back costs.
    s.submit(StepId(1), None, now);
    s.submit(StepId(2), None, now);
    s.dispatch(now);
    let outs = drain(&mut s);
    let long = assigned(&outs, w[0]).expect("worker 0 has a step");
    let short = assigned(&outs, w[1]).expect("worker 1 has a step");
    now += 5 * SEC;
    assert_eq!(
        s.result(w[1], short, 5 * SEC, 5 * SEC, now),
        Verdict::Deliver
    );
    let outs = drain(&mut s);
    assert_eq!(released(&outs), vec![HostId(1)]);
    assert_eq!(requested(&outs), 0, "nothing queued needs a host");
    // The long step ends; the next cycle asks for the host again.
    now += 95 * SEC;
    assert_eq!(
        s.result(w[0], long, 95 * SEC, 95 * SEC, now),
        Verdict::Deliver
    );
    assert!(
        released(&drain(&mut s)).is_empty(),
        "between cycles nothing goes"
    );
    s.submit(StepId(1), None, now);
    s.submit(StepId(2), None, now);
    s.dispatch(now);
    let outs = drain(&mut s);
    assert_eq!(requested(&outs), 1);
}

#[test]
fn an_idle_host_is_kept_when_the_tail_is_shorter_than_getting_it_back() {
    // History is learnt on one host (a second would go back while idle).
    let (mut s, mut w) = core(release_idle(), &[1.0]);
    let mut now = Duration::ZERO;
    learn(&mut s, w[0], 1.0, 1, 12.0, &mut now);
    learn(&mut s, w[0], 1.0, 2, 5.0, &mut now);
    w.push(grow(&mut s, 1, now));
    s.submit(StepId(1), None, now);
    s.submit(StepId(2), None, now);
    s.dispatch(now);
    let outs = drain(&mut s);
    let short = assigned(&outs, w[1]).expect("worker 1 has a step");
    now += 5 * SEC;
    s.result(w[1], short, 5 * SEC, 5 * SEC, now);
    // 7 s left, less than the 10 s a host costs to get back.
    assert!(released(&drain(&mut s)).is_empty());
}

/// A cycle of a long step and a 5 s one on two hosts under `cfg`; whether
/// the host that ran the short step is given back when it ends. The long
/// step takes 100 s (95 s of tail), or was never seen (`None`: a tail of
/// unknown length).
fn short_host_released(cfg: SchedConfig, long_step_s: Option<f64>) -> bool {
    let (mut s, mut w) = core(cfg, &[1.0]);
    let mut now = Duration::ZERO;
    if let Some(secs) = long_step_s {
        learn(&mut s, w[0], 1.0, 1, secs, &mut now);
    }
    learn(&mut s, w[0], 1.0, 2, 5.0, &mut now);
    w.push(grow(&mut s, 1, now));
    s.submit(StepId(1), None, now);
    s.submit(StepId(2), None, now);
    s.dispatch(now);
    let outs = drain(&mut s);
    // The long (or new) step to worker 0, the short one to worker 1.
    let short = assigned(&outs, w[1]).expect("worker 1 has a step");
    now += 5 * SEC;
    s.result(w[1], short, 5 * SEC, 5 * SEC, now);
    !released(&drain(&mut s)).is_empty()
}

fn tail_of_95_s_releases(cfg: SchedConfig) -> bool {
    short_host_released(cfg, Some(100.0))
}

#[test]
fn an_idle_host_is_kept_through_a_tail_shorter_than_a_grant_costs() {
    let with_cost = |secs: u64| SchedConfig {
        grant_cost: Duration::from_secs(secs),
        ..release_idle()
    };
    // 95 s of idling is cheaper than 10 s of waiting plus a grant worth 120 s.
    assert!(!tail_of_95_s_releases(with_cost(120)));
    // It is not when a grant is worth 60 s, nor when grants are free.
    assert!(tail_of_95_s_releases(with_cost(60)));
    assert!(tail_of_95_s_releases(with_cost(0)));
}

fn unknown_tail_releases(cfg: SchedConfig) -> bool {
    short_host_released(cfg, None)
}

#[test]
fn a_tail_of_unknown_length_keeps_its_hosts_when_grants_cost() {
    let with_cost = |secs: u64| SchedConfig {
        grant_cost: Duration::from_secs(secs),
        ..release_idle()
    };
    // The first cycle: the running step was never seen.
    assert!(!unknown_tail_releases(with_cost(300)));
    assert!(unknown_tail_releases(with_cost(0)));
}

#[test]
fn a_suspended_host_goes_back_after_its_grace_and_its_step_is_sent_again() {
    let cfg = SchedConfig {
        release_suspended: true,
        suspend_timeout: 30 * SEC,
        ..SchedConfig::default()
    };
    let (mut s, w) = core(cfg, &[1.0, 1.0]);
    let mut now = Duration::ZERO;
    s.submit(StepId(1), None, now);
    s.submit(StepId(2), None, now);
    s.dispatch(now);
    let outs = drain(&mut s);
    let t0 = assigned(&outs, w[0]).expect("worker 0 has a step");
    let t1 = assigned(&outs, w[1]).expect("worker 1 has a step");
    s.host_suspended(HostId(0), now);
    assert_eq!(s.next_deadline(), Some(now + 30 * SEC));
    now += 30 * SEC;
    s.on_deadline(now);
    let outs = drain(&mut s);
    assert_eq!(released(&outs), vec![HostId(0)]);
    assert_eq!(requested(&outs), 1, "a replacement is asked for");
    // The step goes to the other worker once it is free.
    s.result(w[1], t1, SEC, SEC, now);
    assert_eq!(assigned(&drain(&mut s), w[1]), Some(t0));
    let stats = s.stats(now);
    assert_eq!(stats.hosts.lost, 1, "the owner took the host");
}

/// A core on hosts of `speeds` that has learnt step 1 (40 s) and step 2
/// (4 s) on worker 0, then a cycle of both dispatched in arrival order: the
/// core, its workers, the time, and the cycle's assignments.
fn long_and_short(
    cfg: SchedConfig,
    speeds: &[f64],
) -> (Sched, Vec<WorkerId>, Duration, Vec<Output>) {
    let (mut s, w) = core(cfg, speeds);
    let mut now = Duration::ZERO;
    learn(&mut s, w[0], 1.0, 1, 40.0, &mut now);
    learn(&mut s, w[0], 1.0, 2, 4.0, &mut now);
    s.submit(StepId(1), None, now);
    s.submit(StepId(2), None, now);
    s.dispatch(now);
    let outs = drain(&mut s);
    (s, w, now, outs)
}

#[test]
fn an_idle_fast_host_copies_a_straggler_and_the_first_result_wins_once() {
    let cfg = SchedConfig {
        stragglers: true,
        ..SchedConfig::default()
    };
    // Worker 0 is slow (speed 1), worker 1 four times as fast. Arrival
    // order puts step 1 (40 s) on the slow worker, step 2 on the fast one.
    let (mut s, w, mut now, outs) = long_and_short(cfg, &[1.0, 4.0]);
    let slow = assigned(&outs, w[0]).expect("worker 0 has a step");
    let quick = assigned(&outs, w[1]).expect("worker 1 has a step");
    now += SEC;
    s.result(w[1], quick, SEC, SEC, now);
    // The fast worker copies step 1: 10 s there against 39 s left here.
    let outs = drain(&mut s);
    assert_eq!(assigned(&outs, w[1]), Some(slow));
    now += 10 * SEC;
    assert_eq!(
        s.result(w[1], slow, 10 * SEC, 10 * SEC, now),
        Verdict::Deliver
    );
    now += 29 * SEC;
    assert_eq!(
        s.result(w[0], slow, 40 * SEC, 40 * SEC, now),
        Verdict::Duplicate
    );
    let stats = s.stats(now);
    assert_eq!(stats.steps_delivered, 2 + 2, "two learnt, two in the cycle");
    assert_eq!(stats.step_copies, 5);
}

#[test]
fn a_step_whose_every_copy_is_suspended_gets_another_on_an_idle_host() {
    let cfg = SchedConfig {
        stragglers: true,
        ..SchedConfig::default()
    };
    // Step 1 (40 s) goes to slow worker 0, step 2 to fast worker 1, and
    // idle fast worker 2 copies step 1 at once.
    let (mut s, w, mut now, outs) = long_and_short(cfg, &[1.0, 4.0, 4.0]);
    let long = assigned(&outs, w[0]).expect("worker 0 has a step");
    let quick = assigned(&outs, w[1]).expect("worker 1 has a step");
    assert_eq!(assigned(&outs, w[2]), Some(long), "worker 2 copies step 1");
    // Both copies' owners come back.
    now += SEC;
    s.host_suspended(HostId(0), now);
    s.host_suspended(HostId(2), now);
    drain(&mut s);
    // Worker 1 is done with its step: step 1 has two copies, both stuck.
    s.result(w[1], quick, SEC, SEC, now);
    let outs = drain(&mut s);
    assert_eq!(
        assigned(&outs, w[1]),
        Some(long),
        "a third copy on the idle host: {outs:?}"
    );
    now += 10 * SEC;
    assert_eq!(
        s.result(w[1], long, 10 * SEC, 10 * SEC, now),
        Verdict::Deliver
    );
}

#[test]
fn no_copy_when_the_idle_host_would_not_finish_sooner() {
    let cfg = SchedConfig {
        stragglers: true,
        ..SchedConfig::default()
    };
    let (mut s, w, mut now, outs) = long_and_short(cfg, &[1.0, 1.0]);
    let quick = assigned(&outs, w[1]).expect("worker 1 has a step");
    now += 4 * SEC;
    s.result(w[1], quick, 4 * SEC, 4 * SEC, now);
    assert_eq!(assigned(&drain(&mut s), w[1]), None);
}

#[test]
fn a_worker_twice_much_slower_than_its_speed_is_retired() {
    let cfg = SchedConfig {
        fast_abort: Some(3.0),
        ..SchedConfig::default()
    };
    let (mut s, w) = core(cfg, &[1.0, 1.0]);
    let mut now = Duration::ZERO;
    learn(&mut s, w[0], 1.0, 1, 10.0, &mut now);
    learn(&mut s, w[0], 1.0, 2, 10.0, &mut now);
    // Step 1 goes to worker 0 (arrival order, both idle), which stalls.
    s.submit(StepId(1), None, now);
    s.dispatch(now);
    let t = assigned(&drain(&mut s), w[0]).expect("worker 0 has the step");
    assert_eq!(s.next_deadline(), Some(now + 30 * SEC));
    now += 30 * SEC;
    s.on_deadline(now);
    // First strike: the step is sent again, to the other worker.
    let outs = drain(&mut s);
    assert_eq!(assigned(&outs, w[1]), Some(t));
    assert!(released(&outs).is_empty());
    now += 10 * SEC;
    assert_eq!(s.result(w[1], t, 10 * SEC, 10 * SEC, now), Verdict::Deliver);
    // Worker 0's late answer is a duplicate; its time does not enter the history.
    now += 20 * SEC;
    assert_eq!(
        s.result(w[0], t, 60 * SEC, 60 * SEC, now),
        Verdict::Duplicate
    );
    assert_eq!(s.history().estimate(&StepId(1)), Some(10.0));
    drain(&mut s);
    // Second strike, counted when a result comes back far too late.
    s.submit(StepId(2), None, now);
    s.dispatch(now);
    let outs = drain(&mut s);
    let t2 = assigned(&outs, w[0]).expect("worker 0 gets step 2");
    now += 29 * SEC;
    assert_eq!(s.next_deadline(), Some(now + SEC));
    assert_eq!(
        s.result(w[0], t2, 29 * SEC, 29 * SEC, now),
        Verdict::Deliver
    );
    assert!(
        released(&drain(&mut s)).is_empty(),
        "29 s is within 3x 10 s"
    );
    s.submit(StepId(1), None, now);
    s.dispatch(now);
    let t3 = assigned(&drain(&mut s), w[0]).expect("worker 0 gets step 1");
    now += 35 * SEC;
    s.result(w[0], t3, 35 * SEC, 35 * SEC, now);
    let outs = drain(&mut s);
    assert_eq!(released(&outs), vec![HostId(0)]);
    assert_eq!(requested(&outs), 1, "a replacement is asked for");
    assert!(s.is_retired(HostId(0)));
    // The host is excluded from its class before it goes back, so that the
    // request for its replacement cannot take it again.
    let excluded = outs
        .iter()
        .position(|o| {
            *o == Output::ExcludeHost {
                class: "c".into(),
                host: HostId(0),
            }
        })
        .expect("the retired host is excluded");
    let release = outs
        .iter()
        .position(|o| matches!(o, Output::ReleaseHost { .. }))
        .unwrap();
    let request = outs
        .iter()
        .position(|o| matches!(o, Output::RequestHosts { .. }))
        .unwrap();
    assert!(excluded < release && release < request, "{outs:?}");
    assert_eq!(s.stats(now).hosts.retired_offers, 0);
    // Offered the same host again all the same (an exclusion the pool
    // failed), the core gives it back, asks again, and counts the offer.
    s.host_added(HostId(0), "c", Some(1.0), now);
    let outs = drain(&mut s);
    assert_eq!(released(&outs), vec![HostId(0)]);
    assert_eq!(requested(&outs), 1);
    assert!(!outs.iter().any(|o| matches!(o, Output::Spawn { .. })));
    assert!(!outs.iter().any(|o| matches!(o, Output::ExcludeHost { .. })));
    let stats = s.stats(now);
    assert_eq!((stats.hosts.retired, stats.hosts.retired_offers), (1, 1));
}

#[test]
fn without_the_policies_nothing_is_released_copied_or_retired() {
    let (mut s, w) = core(SchedConfig::default(), &[1.0, 4.0]);
    let mut now = Duration::ZERO;
    learn(&mut s, w[0], 1.0, 1, 100.0, &mut now);
    learn(&mut s, w[0], 1.0, 2, 4.0, &mut now);
    s.submit(StepId(1), None, now);
    s.submit(StepId(2), None, now);
    s.dispatch(now);
    let outs = drain(&mut s);
    let quick = assigned(&outs, w[1]).expect("worker 1 has a step");
    now += SEC;
    s.result(w[1], quick, SEC, SEC, now);
    let outs = drain(&mut s);
    assert!(outs.is_empty(), "{outs:?}");
    assert_eq!(s.next_deadline(), None);
}

#[test]
fn an_idle_host_goes_back_with_the_request_that_would_take_it_again() {
    let (mut s, w0) = core(release_idle(), &[1.0]);
    let w0 = w0[0];
    let mut now = Duration::ZERO;
    learn(&mut s, w0, 1.0, 1, 100.0, &mut now);
    learn(&mut s, w0, 1.0, 2, 5.0, &mut now);
    learn(&mut s, w0, 1.0, 3, 5.0, &mut now);
    // Three hosts wanted; a cycle of three steps asks for two more hosts.
    s.set_class("c", 3, now);
    for id in 1..=3 {
        s.submit(StepId(id), None, now);
    }
    s.dispatch(now);
    let outs = drain(&mut s);
    assert!(assigned(&outs, w0).is_some());
    assert_eq!(requested(&outs), 2);
    // One is granted; the other is still being asked for.
    s.host_added(HostId(1), "c", Some(1.0), now);
    let w1 = drain(&mut s)
        .into_iter()
        .find_map(|o| match o {
            Output::Spawn { worker, .. } => Some(worker),
            _ => None,
        })
        .expect("a worker on the new host");
    s.worker_joined(w1, now);
    let t = assigned(&drain(&mut s), w1).expect("the new worker gets a step");
    now += 5 * SEC;
    assert_eq!(s.result(w1, t, 5 * SEC, 5 * SEC, now), Verdict::Deliver);
    let t = assigned(&drain(&mut s), w1).expect("and the last one");
    now += 5 * SEC;
    assert_eq!(s.result(w1, t, 5 * SEC, 5 * SEC, now), Verdict::Deliver);
    // The tail (the long step) is long: the idle host goes back, and the
    // request still pending, which would take it straight back, is withdrawn.
    let outs = drain(&mut s);
    assert_eq!(released(&outs), vec![HostId(1)]);
    assert!(
        outs.iter()
            .any(|o| matches!(o, Output::CancelRequests { class } if class == "c")),
        "{outs:?}"
    );
}

/// A suspended host given back after its grace, whose worker (resumed
/// before CARMI killed it) answers its step first: the result is delivered
/// once, and the statistics count that copy as the delivered one.
#[test]
fn a_late_answer_from_a_released_worker_is_delivered_once_and_counted() {
    let cfg = SchedConfig {
        release_suspended: true,
        suspend_timeout: Duration::from_secs(1),
        ..SchedConfig::default()
    };
    let (mut s, w) = core(cfg, &[1.0, 1.0]);
    let t = s.submit(StepId(0), None, Duration::ZERO);
    s.dispatch(Duration::ZERO);
    drain(&mut s);
    s.host_suspended(HostId(0), Duration::ZERO);
    s.on_deadline(Duration::from_secs(1));
    let outs = drain(&mut s);
    assert_eq!(released(&outs), vec![HostId(0)]);
    assert_eq!(assigned(&outs, w[1]), Some(t));
    let took = Duration::from_millis(1500);
    let now = Duration::from_secs(2);
    assert_eq!(s.result(w[0], t, took, took, now), Verdict::Deliver);
    assert_eq!(s.result(w[1], t, took, took, now), Verdict::Duplicate);
    s.sanity_check();
    let stats = s.stats(now);
    assert_eq!(stats.steps_delivered, 1);
    let outcomes: Vec<RunOutcome> = stats.steps.iter().map(|r| r.outcome).collect();
    assert_eq!(outcomes, vec![RunOutcome::Delivered, RunOutcome::Discarded]);
}
