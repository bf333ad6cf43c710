//! The scheduler core driven with virtual time: no sockets, no clock.

use super::*;
use crate::stats::RunOutcome;

const SEC: Duration = Duration::from_secs(1);

/// A core, a virtual clock, and the outputs not yet checked.
struct Harness {
    s: Sched,
    now: Time,
}

impl Harness {
    fn new(cfg: SchedConfig) -> Harness {
        Harness {
            s: Sched::new(cfg, Box::new(ArrivalOrder)),
            now: Duration::ZERO,
        }
    }

    /// A class `c` of `n` hosts, granted and joined: returns the workers.
    fn with_workers(cfg: SchedConfig, n: u64) -> (Harness, Vec<WorkerId>) {
        let mut h = Harness::new(cfg);
        h.s.set_class("c", n as u32, h.now);
        assert_eq!(
            h.take(),
            vec![Output::RequestHosts {
                class: "c".into(),
                count: n as u32
            }]
        );
        let mut workers = Vec::new();
        for i in 0..n {
            h.s.host_added(HostId(i), "c", None, h.now);
            let w = match h.take().as_slice() {
                [Output::Spawn { host, worker }] if *host == HostId(i) => *worker,
                other => panic!("expected one spawn, got {other:?}"),
            };
            h.s.worker_joined(w, h.now);
            workers.push(w);
        }
        h.check();
        (h, workers)
    }

    fn advance(&mut self, d: Duration) {
        self.now += d;
    }

    fn check(&self) {
        self.s.sanity_check();
    }

    /// Every output since the last call.
    fn take(&mut self) -> Vec<Output> {
        self.check();
        std::iter::from_fn(|| self.s.poll_output()).collect()
    }

    /// The assignments among the outputs, as (step, worker).
    fn assigned(&mut self) -> Vec<(u64, WorkerId)> {
        self.take()
            .into_iter()
            .map(|o| match o {
                Output::Assign { step, worker, .. } => (step.0, worker),
                other => panic!("expected only assignments, got {other:?}"),
            })
            .collect()
    }

    fn submit(&mut self, n: u64) -> Vec<Ticket> {
        let t = (0..n)
            .map(|i| self.s.submit(StepId(i), None, self.now))
            .collect();
        self.s.dispatch(self.now);
        t
    }

    fn answer(&mut self, w: WorkerId, t: Ticket) -> Verdict {
        let v = self.s.result(w, t, SEC / 2, SEC, self.now);
        self.check();
        v
    }
}

fn cfg() -> SchedConfig {
    SchedConfig::default()
}

#[test]
fn hosts_are_requested_spawned_replaced_and_released() {
    let (mut h, w) = Harness::with_workers(cfg(), 2);
    // A host beyond the desired count goes straight back.
    h.s.host_added(HostId(9), "c", None, h.now);
    assert_eq!(h.take(), vec![Output::ReleaseHost { host: HostId(9) }]);
    // A lost host is replaced.
    h.s.host_lost(HostId(0), h.now);
    assert_eq!(
        h.take(),
        vec![Output::RequestHosts {
            class: "c".into(),
            count: 1
        }]
    );
    // Shrinking releases an idle host; growing asks for the difference.
    h.s.set_class("c", 0, h.now);
    assert_eq!(h.take(), vec![Output::ReleaseHost { host: HostId(1) }]);
    assert!(
        h.s.find_worker_host(w[1]).is_none(),
        "its worker left with it"
    );
    h.s.set_class("c", 3, h.now);
    assert_eq!(
        h.take(),
        vec![Output::RequestHosts {
            class: "c".into(),
            count: 2
        }]
    );
    h.s.hosts_not_granted("c", 2, h.now);
    h.s.set_class("c", 3, h.now);
    assert_eq!(
        h.take(),
        vec![Output::RequestHosts {
            class: "c".into(),
            count: 2
        }]
    );
}

#[test]
fn steps_go_out_in_arrival_order_and_duplicates_are_dropped() {
    let (mut h, w) = Harness::with_workers(cfg(), 2);
    let t = h.submit(4);
    assert_eq!(h.assigned(), vec![(0, w[0]), (1, w[1])]);
    h.advance(SEC);
    assert_eq!(h.answer(w[1], t[1]), Verdict::Deliver);
    assert_eq!(h.assigned(), vec![(2, w[1])]);
    // A repeated answer (a retransmission, a late copy) is not delivered again.
    assert_eq!(h.answer(w[1], t[1]), Verdict::Duplicate);
    assert_eq!(h.answer(w[0], t[0]), Verdict::Deliver);
    assert_eq!(h.assigned(), vec![(3, w[0])]);
    assert_eq!(h.answer(w[0], t[3]), Verdict::Deliver);
    assert_eq!(h.answer(w[1], t[2]), Verdict::Deliver);
    assert_eq!(h.s.open_tickets(), 0);
    assert!(h.take().is_empty());
}

#[test]
fn a_lost_worker_puts_its_step_back_at_the_front() {
    let (mut h, w) = Harness::with_workers(cfg(), 2);
    let t = h.submit(4);
    assert_eq!(h.assigned().len(), 2);
    // Host 0 vanishes: step 0 waits in front of steps 2 and 3.
    h.s.host_lost(HostId(0), h.now);
    assert_eq!(
        h.take(),
        vec![Output::RequestHosts {
            class: "c".into(),
            count: 1
        }]
    );
    assert_eq!(h.answer(w[1], t[1]), Verdict::Deliver);
    assert_eq!(h.assigned(), vec![(0, w[1])]);
    // The lost worker's answer, should it still arrive, is not delivered twice.
    assert_eq!(h.answer(w[1], t[0]), Verdict::Deliver);
    assert_eq!(h.answer(w[0], t[0]), Verdict::Duplicate);
    let stats = h.s.stats(h.now);
    assert_eq!(stats.hosts_lost, 1);
    assert_eq!(stats.steps_delivered, 2);
}

#[test]
fn a_crashed_worker_is_respawned_on_its_host() {
    let (mut h, w) = Harness::with_workers(cfg(), 1);
    let t = h.submit(1);
    assert_eq!(h.assigned(), vec![(0, w[0])]);
    h.s.worker_lost(w[0], LossCause::Crashed, h.now);
    let w1 = match h.take().as_slice() {
        [Output::Spawn { host, worker }] if *host == HostId(0) => *worker,
        other => panic!("expected a respawn, got {other:?}"),
    };
    h.s.worker_joined(w1, h.now);
    assert_eq!(h.assigned(), vec![(0, w1)]);
    assert_eq!(h.answer(w1, t[0]), Verdict::Deliver);
}

#[test]
fn a_suspended_worker_keeps_its_step_then_it_is_resent_and_the_first_answer_wins() {
    let mut c = cfg();
    c.suspend_timeout = 5 * SEC;
    let (mut h, w) = Harness::with_workers(c, 2);
    let t = h.submit(1);
    assert_eq!(h.assigned(), vec![(0, w[0])]);
    h.advance(SEC);
    h.s.host_suspended(HostId(0), h.now);
    assert_eq!(h.s.next_deadline(), Some(6 * SEC));
    // Before the grace period ends nothing moves.
    h.advance(4 * SEC);
    h.s.on_deadline(h.now);
    assert!(h.take().is_empty());
    h.advance(SEC);
    h.s.on_deadline(h.now);
    assert_eq!(h.assigned(), vec![(0, w[1])]);
    assert_eq!(h.s.next_deadline(), None);
    // The owner leaves; the suspended copy answers first and wins.
    h.advance(SEC);
    h.s.host_resumed(HostId(0), h.now);
    assert!(h.take().is_empty());
    assert_eq!(h.answer(w[0], t[0]), Verdict::Deliver);
    assert_eq!(h.answer(w[1], t[0]), Verdict::Duplicate);
    let stats = h.s.stats(h.now);
    let outcomes: Vec<RunOutcome> = stats.steps.iter().map(|s| s.outcome).collect();
    assert_eq!(outcomes, vec![RunOutcome::Delivered, RunOutcome::Discarded]);
    let suspended: Vec<_> = stats.timeline[0]
        .periods
        .iter()
        .filter(|p| p.kind == crate::stats::PeriodKind::Suspended)
        .map(|p| (p.start_s, p.end_s))
        .collect();
    assert_eq!(suspended, vec![(1.0, 7.0)]);
    assert!(h.take().is_empty());
}

#[test]
fn the_resent_copy_may_win_and_the_late_suspended_answer_is_dropped() {
    let mut c = cfg();
    c.suspend_timeout = SEC;
    let (mut h, w) = Harness::with_workers(c, 2);
    let t = h.submit(1);
    h.take();
    h.s.host_suspended(HostId(0), h.now);
    h.advance(SEC);
    h.s.on_deadline(h.now);
    assert_eq!(h.assigned(), vec![(0, w[1])]);
    assert_eq!(h.answer(w[1], t[0]), Verdict::Deliver);
    h.s.host_resumed(HostId(0), h.now);
    assert_eq!(h.answer(w[0], t[0]), Verdict::Duplicate);
    // The suspended worker losing its host now re-queues nothing.
    h.s.host_lost(HostId(0), h.now);
    assert_eq!(h.s.open_tickets(), 0);
}

#[test]
fn a_poison_step_fails_after_max_attempts_and_the_rest_complete() {
    let (mut h, w) = Harness::with_workers(cfg(), 2);
    let t = h.submit(3);
    assert_eq!(h.assigned(), vec![(0, w[0]), (1, w[1])]);
    let mut victim = w[0];
    for attempt in 1..=3 {
        h.s.worker_lost(victim, LossCause::Crashed, h.now);
        let outs = h.take();
        if attempt < 3 {
            // Respawned on the same host; the poison step goes out again first.
            let fresh = match outs.as_slice() {
                [Output::Spawn { worker, .. }] => *worker,
                other => panic!("attempt {attempt}: {other:?}"),
            };
            h.s.worker_joined(fresh, h.now);
            assert_eq!(h.assigned(), vec![(0, fresh)]);
            victim = fresh;
        } else {
            assert!(
                matches!(&outs[0], Output::StepFailed { step, reason, .. }
                    if *step == StepId(0) && reason.contains("3 times")),
                "{outs:?}"
            );
            // The host still gets a worker, which takes the next step.
            let fresh = match &outs[1..] {
                [Output::Spawn { worker, .. }] => *worker,
                other => panic!("{other:?}"),
            };
            h.s.worker_joined(fresh, h.now);
            assert_eq!(h.assigned(), vec![(2, fresh)]);
            victim = fresh;
        }
    }
    assert_eq!(h.answer(w[1], t[1]), Verdict::Deliver);
    assert_eq!(h.answer(victim, t[2]), Verdict::Deliver);
    // A late answer of the failed step is not delivered either.
    assert_eq!(h.answer(w[1], t[0]), Verdict::Duplicate);
    assert_eq!(h.s.open_tickets(), 0);
}

#[test]
fn a_host_that_keeps_killing_workers_is_given_back() {
    let mut c = cfg();
    c.max_respawns = 1;
    let (mut h, w) = Harness::with_workers(c, 1);
    h.s.worker_lost(w[0], LossCause::Crashed, h.now);
    let w1 = match h.take().as_slice() {
        [Output::Spawn { worker, .. }] => *worker,
        other => panic!("{other:?}"),
    };
    h.s.worker_lost(w1, LossCause::Crashed, h.now);
    assert_eq!(
        h.take(),
        vec![
            Output::ReleaseHost { host: HostId(0) },
            Output::RequestHosts {
                class: "c".into(),
                count: 1
            }
        ]
    );
}

#[test]
fn prefetch_gives_each_worker_several_steps() {
    let mut c = cfg();
    c.prefetch = 2;
    let (mut h, w) = Harness::with_workers(c, 2);
    h.submit(5);
    assert_eq!(
        h.assigned(),
        vec![(0, w[0]), (1, w[0]), (2, w[1]), (3, w[1])]
    );
}

#[test]
fn statistics_follow_virtual_time() {
    let (mut h, w) = Harness::with_workers(cfg(), 2);
    h.s.begin_cycle(CycleId(0), h.now);
    let t = h.submit(2);
    h.take();
    h.advance(2 * SEC);
    h.s.result(w[0], t[0], SEC, SEC, h.now);
    h.s.result(w[1], t[1], SEC, SEC, h.now);
    h.s.end_cycle(CycleId(0), h.now);
    h.advance(2 * SEC);
    h.s.finish(h.now);
    let outs = h.take();
    assert_eq!(outs.len(), 2, "both hosts released: {outs:?}");
    let stats = h.s.stats(h.now);
    assert_eq!(stats.execution_time_s, 4.0);
    assert_eq!(stats.occupancy_s, 8.0);
    assert_eq!(stats.cpu_time_s, 2.0);
    assert_eq!(stats.efficiency, 0.25);
    assert_eq!((stats.hosts_added, stats.hosts_lost), (2, 0));
    assert_eq!(
        stats.cycles,
        vec![crate::stats::CycleTime {
            cycle: CycleId(0),
            begin_s: 0.0,
            end_s: Some(2.0)
        }]
    );
    let busy: Vec<_> = stats.timeline[0]
        .periods
        .iter()
        .filter(|p| p.kind == crate::stats::PeriodKind::Busy)
        .map(|p| (p.start_s, p.end_s))
        .collect();
    assert_eq!(busy, vec![(1.0, 2.0)]);
    let json = serde_json::to_string(&stats).unwrap();
    let back: crate::stats::Stats = serde_json::from_str(&json).unwrap();
    assert_eq!(back, stats);
    // After finishing nothing more is requested.
    h.s.host_added(HostId(7), "c", None, h.now);
    assert_eq!(h.take(), vec![Output::ReleaseHost { host: HostId(7) }]);
}

#[test]
fn a_worker_joining_on_a_suspended_host_waits_for_the_owner_to_leave() {
    let mut h = Harness::new(cfg());
    h.s.set_class("c", 1, h.now);
    h.take();
    h.s.host_added(HostId(0), "c", None, h.now);
    let w = match h.take().as_slice() {
        [Output::Spawn { worker, .. }] => *worker,
        other => panic!("{other:?}"),
    };
    h.s.host_suspended(HostId(0), h.now);
    h.s.worker_joined(w, h.now);
    h.submit(1);
    assert!(h.take().is_empty(), "nothing goes to a stopped worker");
    h.s.host_resumed(HostId(0), h.now);
    assert_eq!(h.assigned(), vec![(0, w)]);
}

#[test]
fn cancelled_tickets_are_not_sent_and_their_answers_are_dropped() {
    let (mut h, w) = Harness::with_workers(cfg(), 1);
    let t = h.submit(3);
    assert_eq!(h.assigned(), vec![(0, w[0])]);
    h.s.cancel(t[0]);
    h.s.cancel(t[1]);
    h.check();
    assert_eq!(h.answer(w[0], t[0]), Verdict::Duplicate);
    assert_eq!(h.assigned(), vec![(2, w[0])]);
    assert_eq!(h.s.open_tickets(), 1);
}

#[test]
fn status_counts_hosts_busy_suspended_and_steps() {
    let cfg = SchedConfig::default();
    let (mut h, _workers) = Harness::with_workers(cfg, 3);
    assert_eq!(
        h.s.status(),
        crate::proto::Status {
            hosts: 3,
            wanted: 3,
            ..Default::default()
        }
    );
    // Four steps on three one-at-a-time workers: three run, one waits.
    h.submit(4);
    h.take();
    let st = h.s.status();
    assert_eq!((st.busy, st.running, st.queued), (3, 3, 1), "{st:?}");
    h.s.host_suspended(HostId(0), h.now);
    h.take();
    let st = h.s.status();
    assert_eq!((st.hosts, st.suspended, st.busy), (3, 1, 2), "{st:?}");
}

/// A host suspended and resumed while its worker is still starting (the
/// real server's order when an owner drops by before the worker connected):
/// the worker must not be given steps before it joined, as the server has
/// no connection to send them on and would drop them.
#[test]
fn a_worker_suspended_and_resumed_before_it_joined_gets_steps_only_once_joined() {
    let mut c = cfg();
    c.release_suspended = true;
    let mut h = Harness::new(c);
    h.s.set_class("c", 1, h.now);
    h.take();
    h.s.host_added(HostId(0), "c", None, h.now);
    let w = match h.take().as_slice() {
        [Output::Spawn { worker, .. }] => *worker,
        other => panic!("expected a spawn, got {other:?}"),
    };
    h.s.host_suspended(HostId(0), h.now);
    h.advance(SEC);
    h.s.host_resumed(HostId(0), h.now);
    resumed_worker_gets_steps_only_once_joined(&mut h, w);
    assert_eq!(h.s.open_tickets(), 0);
}

/// The same without the policy: a worker respawned on a suspended host
/// starts suspended, and its host's resumption must not make it ready.
#[test]
fn a_worker_respawned_on_a_suspended_host_waits_for_its_join_after_resumption() {
    let (mut h, w) = Harness::with_workers(cfg(), 1);
    h.s.host_suspended(HostId(0), h.now);
    h.s.worker_lost(w[0], LossCause::Crashed, h.now);
    let fresh = match h.take().as_slice() {
        [Output::Spawn { worker, .. }] => *worker,
        other => panic!("expected a respawn, got {other:?}"),
    };
    h.s.host_resumed(HostId(0), h.now);
    resumed_worker_gets_steps_only_once_joined(&mut h, fresh);
}

/// After its host resumed, worker `w` (spawned, not joined) gets no step
/// until it joins; then it gets the one queued and its answer is delivered.
fn resumed_worker_gets_steps_only_once_joined(h: &mut Harness, w: WorkerId) {
    let t = h.submit(1);
    assert_eq!(
        h.assigned(),
        vec![],
        "a step went to a worker not joined yet"
    );
    h.s.worker_joined(w, h.now);
    assert_eq!(h.assigned(), vec![(0, w)]);
    assert_eq!(h.answer(w, t[0]), Verdict::Deliver);
}
