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
    assert_eq!(stats.hosts.lost, 1);
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
    // Each step took a second by the clock, half of it on the CPU.
    h.s.result(w[0], t[0], SEC / 2, SEC, h.now);
    h.s.result(w[1], t[1], SEC / 2, SEC, h.now);
    h.s.end_cycle(CycleId(0), h.now);
    h.advance(2 * SEC);
    h.s.finish(h.now);
    let outs = h.take();
    assert_eq!(outs.len(), 2, "both hosts released: {outs:?}");
    let stats = h.s.stats(h.now);
    assert_eq!(stats.execution_time_s, 4.0);
    assert_eq!(stats.occupancy_s, 8.0);
    assert_eq!(stats.cpu_time_s, 1.0);
    assert_eq!(stats.cpu_efficiency, 0.125);
    // Efficiency is the paper's: busy time (by the clock) over occupancy.
    assert_eq!(stats.busy_time_s, 2.0);
    assert_eq!(stats.efficiency, 0.25);
    assert_eq!((stats.hosts.added, stats.hosts.lost), (2, 0));
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
    // Statistics written before busy time was kept still read.
    let mut old: serde_json::Value = serde_json::from_str(&json).unwrap();
    let fields = old.as_object_mut().unwrap();
    fields.remove("busy_time_s");
    fields.remove("cpu_efficiency");
    let back: crate::stats::Stats = serde_json::from_value(old).unwrap();
    assert_eq!((back.busy_time_s, back.efficiency), (0.0, 0.25));
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

/// The same without the policy: a worker lost on a suspended host is
/// spawned again only when the host resumes (the pool would refuse it
/// before), and that must not make it ready before it joins.
#[test]
fn a_worker_respawned_on_a_suspended_host_waits_for_its_join_after_resumption() {
    let (mut h, w) = Harness::with_workers(cfg(), 1);
    h.s.host_suspended(HostId(0), h.now);
    h.s.worker_lost(w[0], LossCause::Crashed, h.now);
    assert_eq!(h.take(), vec![], "no spawn on a suspended host");
    h.s.host_resumed(HostId(0), h.now);
    let fresh = match h.take().as_slice() {
        [Output::Spawn { worker, .. }] => *worker,
        other => panic!("expected a respawn, got {other:?}"),
    };
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

/// The assignments among the outputs, as (ticket, worker).
fn assignments(outs: Vec<Output>) -> Vec<(Ticket, WorkerId)> {
    outs.into_iter()
        .filter_map(|o| match o {
            Output::Assign { ticket, worker, .. } => Some((ticket, worker)),
            _ => None,
        })
        .collect()
}

/// Many cycles: the core keeps only the open tickets (a cycle's worth),
/// every result is delivered once, and a late copy of a ticket closed
/// hundreds of cycles ago is still recognised and dropped.
#[test]
fn closed_tickets_leave_the_core_and_late_copies_are_still_dropped() {
    const CYCLES: u64 = 300;
    const STEPS: u64 = 10;
    let mut c = cfg();
    c.prefetch = 2;
    let (mut h, w) = Harness::with_workers(c, 3);
    let mut first = None;
    let mut delivered = 0;
    for cycle in 0..CYCLES {
        h.s.begin_cycle(CycleId(cycle), h.now);
        let tickets: Vec<Ticket> = (0..STEPS)
            .map(|i| h.s.submit(StepId(i), Some(CycleId(cycle)), h.now))
            .collect();
        first.get_or_insert((tickets[0], w[0]));
        h.s.dispatch(h.now);
        let mut running = assignments(h.take());
        while let Some((t, worker)) = running.pop() {
            assert!(h.s.tasks.len() <= STEPS as usize, "{}", h.s.tasks.len());
            h.advance(SEC);
            assert_eq!(h.answer(worker, t), Verdict::Deliver);
            delivered += 1;
            // An immediate repeat of the same answer is dropped.
            assert_eq!(h.answer(worker, t), Verdict::Duplicate);
            running.extend(assignments(h.take()));
        }
        h.s.end_cycle(CycleId(cycle), h.now);
        assert!(h.s.tasks.is_empty(), "cycle {cycle} left tickets behind");
        assert_eq!(h.s.status().running, 0);
    }
    assert_eq!(delivered, CYCLES * STEPS);
    let (old, worker) = first.expect("a first cycle ran");
    assert_eq!(h.answer(worker, old), Verdict::Duplicate);
    // A ticket the core never issued is not delivered either.
    assert_eq!(h.answer(worker, Ticket(u64::MAX - 1)), Verdict::Duplicate);
    h.s.cancel(old);
    let stats = h.s.stats(h.now);
    assert_eq!(stats.steps_delivered, CYCLES * STEPS);
    assert_eq!(stats.cycles.len() as u64, CYCLES);
    assert!(h.take().is_empty());
}

/// A host granted with `cfg` whose worker was spawned but has not joined.
fn one_spawned_host(cfg: SchedConfig) -> (Harness, WorkerId) {
    let mut h = Harness::new(cfg);
    h.s.set_class("c", 1, h.now);
    h.take();
    h.s.host_added(HostId(0), "c", None, h.now);
    match h.take().as_slice() {
        [Output::Spawn { worker, .. }] => (h, *worker),
        other => panic!("expected a spawn, got {other:?}"),
    }
}

/// The pool refuses to start a worker on a suspended host (its owner is
/// back; the notice may come later or not at all): that is no crash, so
/// however often it happens the host is kept, and the worker is spawned
/// again when the host resumes. Other failures to start are crashes.
#[test]
fn a_spawn_refused_on_a_suspended_host_waits_for_its_resumption_and_is_no_crash() {
    let mut c = cfg();
    c.max_respawns = 1;
    let (mut h, w) = one_spawned_host(c.clone());
    for round in 0..4 {
        h.s.spawn_failed(w, true, h.now);
        assert_eq!(h.take(), vec![], "round {round}: nothing until it resumes");
        assert_eq!(h.s.status().suspended, 1);
        // The notice arriving after the refusal changes nothing.
        h.s.host_suspended(HostId(0), h.now);
        assert!(h.take().is_empty());
        h.advance(SEC);
        h.s.host_resumed(HostId(0), h.now);
        assert_eq!(
            h.take(),
            vec![Output::Spawn {
                host: HostId(0),
                worker: w
            }],
            "round {round}"
        );
    }
    h.s.worker_joined(w, h.now);
    let t = h.submit(1);
    assert_eq!(h.assigned(), vec![(0, w)]);
    assert_eq!(h.answer(w, t[0]), Verdict::Deliver);
    let stats = h.s.stats(h.now);
    assert_eq!((stats.hosts.added, stats.hosts.lost), (1, 0));
    let suspended = stats.timeline[0]
        .periods
        .iter()
        .filter(|p| p.kind == crate::stats::PeriodKind::Suspended)
        .count();
    assert_eq!(suspended, 4);

    // A failure to start for another reason counts as a crash: with one
    // respawn allowed, the second gives the host back.
    let (mut h, w) = one_spawned_host(c);
    h.s.spawn_failed(w, false, h.now);
    let w1 = match h.take().as_slice() {
        [Output::Spawn { worker, .. }] => *worker,
        other => panic!("expected a respawn, got {other:?}"),
    };
    h.s.spawn_failed(w1, false, h.now);
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

/// With `release_suspended`, a host whose worker waits for its resumption
/// is given back when the grace ends, like any suspended host.
#[test]
fn a_host_refusing_spawns_is_given_back_after_the_grace_when_so_configured() {
    let mut c = cfg();
    c.release_suspended = true;
    c.suspend_timeout = 5 * SEC;
    let (mut h, w) = one_spawned_host(c);
    h.s.spawn_failed(w, true, h.now);
    assert!(h.take().is_empty());
    assert_eq!(h.s.next_deadline(), Some(5 * SEC));
    h.advance(5 * SEC);
    h.s.on_deadline(h.now);
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

/// An assignment the driver could not send (the worker's connection is
/// gone, its loss not decided yet) comes back to the queue at once, goes to
/// another worker, and counts no attempt against the step.
#[test]
fn an_assignment_that_cannot_be_sent_goes_back_to_the_queue() {
    let mut c = cfg();
    c.max_attempts = 1;
    let (mut h, w) = Harness::with_workers(c, 2);
    let t = h.submit(3);
    assert_eq!(h.assigned(), vec![(0, w[0]), (1, w[1])]);
    h.s.assign_failed(w[0], t[0], h.now);
    // Worker 0 takes nothing more; step 0 waits in front of step 2.
    assert!(h.take().is_empty());
    assert_eq!(h.s.status().queued, 2);
    h.advance(SEC);
    assert_eq!(h.answer(w[1], t[1]), Verdict::Deliver);
    assert_eq!(h.assigned(), vec![(0, w[1])]);
    // Its loss, decided later, is no crash of step 0 (one attempt allowed).
    h.s.worker_lost(w[0], LossCause::Crashed, h.now);
    let fresh = match h.take().as_slice() {
        [Output::Spawn { worker, .. }] => *worker,
        other => panic!("expected a respawn only, got {other:?}"),
    };
    h.s.worker_joined(fresh, h.now);
    assert_eq!(h.assigned(), vec![(2, fresh)]);
    assert_eq!(h.answer(w[1], t[0]), Verdict::Deliver);
    assert_eq!(h.answer(fresh, t[2]), Verdict::Deliver);
    assert_eq!(h.s.open_tickets(), 0);
    let lost =
        h.s.stats(h.now)
            .steps
            .iter()
            .filter(|s| s.outcome == RunOutcome::Lost)
            .count();
    assert_eq!(lost, 1, "the copy never sent");
}

/// A worker whose connection dropped gets no steps while its loss is
/// undecided, and gets them again if it joins again.
#[test]
fn a_detached_worker_gets_no_steps_until_it_joins_again() {
    let (mut h, w) = Harness::with_workers(cfg(), 1);
    h.s.worker_detached(w[0], h.now);
    let t = h.submit(1);
    assert!(h.take().is_empty());
    // Suspending and resuming its host does not make it ready either.
    h.s.host_suspended(HostId(0), h.now);
    h.s.host_resumed(HostId(0), h.now);
    assert!(h.take().is_empty());
    h.s.worker_joined(w[0], h.now);
    assert_eq!(h.assigned(), vec![(0, w[0])]);
    assert_eq!(h.answer(w[0], t[0]), Verdict::Deliver);
}
