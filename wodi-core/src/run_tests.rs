//! The run's decisions in virtual time: a small driver plays the server's
//! part (issuing request ids, granting hosts, connecting workers) and the
//! tests read what the run asks for.

use std::time::Duration;

use bytes::Bytes;
use carmi_proto::ids::{HostId, ProcessId, RequestId};
use carmi_proto::msg::{Event, Failure, FailureCode, HostInfo};

use super::*;
use crate::ids::StepId;
use crate::plan::SavedEstimate;
use crate::proto::{ClassSpec, FromMaster, FromWorker, Policies, Status, parse_connect_arg};

/// Plays the server: the run, a clock, and what it asked for so far.
struct Bench {
    run: Run,
    now: Time,
    next_request: u64,
    next_process: u64,
    /// Every CARMI request issued, with its id.
    calls: Vec<(RequestId, CarmiCall)>,
}

fn secs(s: f64) -> Time {
    Duration::from_secs_f64(s)
}

fn init(classes: &[(&str, u32)], max_attempts: u32, policies: Policies) -> FromMaster {
    FromMaster::Init {
        classes: classes
            .iter()
            .map(|(name, count)| ClassSpec::new(*name, "true", *count))
            .collect(),
        executable: "/bin/worker".into(),
        args: vec!["--x".into()],
        prefetch: 1,
        prefetch_max: 0,
        max_attempts,
        suspend_timeout_ms: 60_000,
        ordering: Default::default(),
        speed: Default::default(),
        refine_speed: false,
        learn_from_wall: false,
        policies,
    }
}

impl Bench {
    fn new() -> Bench {
        Bench {
            run: Run::new(RunConfig::new("tok", "10.0.0.1:99"), Duration::ZERO),
            now: Duration::ZERO,
            next_request: 100,
            next_process: 1,
            calls: Vec::new(),
        }
    }

    fn at(&mut self, s: f64) {
        self.now = secs(s);
    }

    /// Ticks the run and carries out its outputs: CARMI requests get ids,
    /// the rest is returned.
    fn drain(&mut self) -> Vec<Output> {
        self.run.tick(self.now);
        let mut out = Vec::new();
        while let Some(o) = self.run.poll_output() {
            if let Output::Carmi { call, request } = &o {
                let id = RequestId(self.next_request);
                self.next_request += 1;
                self.run.issued(*call, id);
                self.calls.push((id, request.clone()));
            }
            out.push(o);
        }
        out
    }

    fn master(&mut self, msg: FromMaster, payload: &str) -> MasterId {
        let m = self.run.master_connected(self.now);
        self.run
            .master_message(m, msg, Bytes::from(payload.to_string()), self.now);
        m
    }

    fn send(&mut self, m: MasterId, msg: FromMaster, payload: &str) {
        self.run
            .master_message(m, msg, Bytes::from(payload.to_string()), self.now);
    }

    /// Grants host `host` to the oldest unanswered request for `class`,
    /// starts the worker the run spawns on it and connects it.
    fn grant(&mut self, class: &str, host: u64) -> WorkerId {
        let (_, _, worker) = self.grant_unconnected(class, host);
        assert!(self.run.worker_connected(worker, self.now));
        worker
    }

    /// Grants host `host` like [`Bench::grant`]; its worker's process
    /// starts but does not connect.
    fn grant_unconnected(&mut self, class: &str, host: u64) -> (RequestId, ProcessId, WorkerId) {
        let request = self
            .calls
            .iter()
            .find(|(_, c)| matches!(c, CarmiCall::AddHosts { class: k, .. } if k == class))
            .map(|(id, _)| *id)
            .expect("hosts were asked for");
        self.grant_to_unconnected(request, class, host)
    }

    /// Grants host `host` of `class` to host request `request`; its
    /// worker's process starts but does not connect.
    fn grant_to_unconnected(
        &mut self,
        request: RequestId,
        class: &str,
        host: u64,
    ) -> (RequestId, ProcessId, WorkerId) {
        let info = HostInfo {
            host: HostId(host),
            name: format!("slot1@m{host}"),
            class: class.into(),
            ad: String::new(),
        };
        let event = Event::HostsAdded {
            request,
            hosts: vec![info],
            remaining: 0,
        };
        self.run.carmi_event(event, self.now);
        self.drain();
        let (spawn, worker) = self
            .calls
            .iter()
            .rev()
            .find_map(|(id, c)| match c {
                CarmiCall::Spawn { host: h, args, .. } if *h == HostId(host) => {
                    let arg = args.last().unwrap().strip_prefix(CONNECT_ARG).unwrap();
                    Some((*id, parse_connect_arg(arg).unwrap().2))
                }
                _ => None,
            })
            .expect("a worker was spawned on the host");
        let process = ProcessId(self.next_process);
        self.next_process += 1;
        let started = Event::ProcessStarted {
            request: spawn,
            process,
            host: HostId(host),
        };
        self.run.carmi_event(started, self.now);
        (spawn, process, worker)
    }

    /// Starts the next worker the run spawns after request `after`, on any
    /// host, granting a new host (`*next_host`, counted up) when the run asked
    /// for one instead (as it does once a host saw too many crashes).
    fn start_next_worker(
        &mut self,
        after: RequestId,
        next_host: &mut u64,
    ) -> (RequestId, ProcessId) {
        let newest_spawn = |b: &Bench| {
            b.calls.iter().rev().find_map(|(id, c)| match c {
                CarmiCall::Spawn { host, .. } if *id > after => Some((*id, *host)),
                _ => None,
            })
        };
        if newest_spawn(self).is_none() {
            let ask = self
                .calls
                .iter()
                .rev()
                .find_map(|(id, c)| matches!(c, CarmiCall::AddHosts { .. }).then_some(*id))
                .expect("the run asks for hosts again");
            let info = HostInfo {
                host: HostId(*next_host),
                name: format!("slot1@m{next_host}"),
                class: "a".into(),
                ad: String::new(),
            };
            *next_host += 1;
            let event = Event::HostsAdded {
                request: ask,
                hosts: vec![info],
                remaining: 0,
            };
            self.run.carmi_event(event, self.now);
            self.drain();
        }
        let (spawn, host) = newest_spawn(self).expect("a worker is spawned again");
        let process = ProcessId(self.next_process);
        self.next_process += 1;
        let started = Event::ProcessStarted {
            request: spawn,
            process,
            host,
        };
        self.run.carmi_event(started, self.now);
        (spawn, process)
    }

    fn result(&mut self, worker: WorkerId, ticket: u64, payload: &str) {
        let msg = FromWorker::Result {
            ticket,
            cpu_us: 1_000_000,
            wall_us: 1_000_000,
        };
        self.run
            .worker_message(worker, msg, Bytes::from(payload.to_string()), self.now);
    }
}

use crate::proto::CONNECT_ARG;

/// The messages for `worker` among `out`, with their payloads as text.
fn to_worker(out: &[Output], worker: WorkerId) -> Vec<(ToWorker, String)> {
    out.iter()
        .filter_map(|o| match o {
            Output::ToWorker {
                worker: w,
                msg,
                payload,
            } if *w == worker => Some((msg.clone(), String::from_utf8_lossy(payload).into())),
            _ => None,
        })
        .collect()
}

fn to_master(out: &[Output], master: MasterId) -> Vec<ToMaster> {
    out.iter()
        .filter_map(|o| match o {
            Output::ToMaster { master: m, msg, .. } if *m == master => Some(msg.clone()),
            _ => None,
        })
        .collect()
}

fn step_tickets(out: &[Output], worker: WorkerId) -> Vec<(u64, StepId)> {
    to_worker(out, worker)
        .into_iter()
        .filter_map(|(m, _)| match m {
            ToWorker::Step { ticket, step } => Some((ticket, step)),
            _ => None,
        })
        .collect()
}

/// One master, one class of one host, a step handed to its worker.
fn one_step_running(max_attempts: u32) -> (Bench, MasterId, WorkerId, u64) {
    let mut b = Bench::new();
    let m = b.master(init(&[("a", 1)], max_attempts, Policies::default()), "init");
    let out = b.drain();
    assert!(to_master(&out, m).contains(&ToMaster::Ready));
    let w = b.grant("a", 1);
    b.send(m, FromMaster::Step { step: StepId(7) }, "data");
    let out = b.drain();
    let steps = step_tickets(&out, w);
    assert_eq!(steps.len(), 1, "{out:?}");
    (b, m, w, steps[0].0)
}

#[test]
fn a_drop_then_a_host_deletion_within_the_grace_is_a_vacate_not_a_crash() {
    // One attempt allowed: a crash would fail the step for good.
    let (mut b, m, w, _) = one_step_running(1);
    b.at(10.0);
    b.run.worker_dropped(w, b.now);
    b.drain();
    b.at(10.3);
    let deleted = Event::HostDeleted {
        request: RequestId(1),
        host: HostId(1),
        reason: "owner back".into(),
    };
    b.run.carmi_event(deleted, b.now);
    b.drain();
    b.at(11.0);
    let out = b.drain();
    assert!(
        !to_master(&out, m)
            .iter()
            .any(|x| matches!(x, ToMaster::StepFailed { .. })),
        "{out:?}"
    );
    // The step waits for a new host, and goes to its worker.
    let w2 = b.grant("a", 2);
    let out = b.drain();
    assert_eq!(step_tickets(&out, w2).len(), 1, "{out:?}");
    assert_eq!(step_tickets(&out, w2)[0].1, StepId(7));
}

#[test]
fn a_drop_with_a_crash_exit_counts_as_a_crash_once_the_grace_ends() {
    let (mut b, m, w, _) = one_step_running(1);
    b.at(10.0);
    b.run.worker_dropped(w, b.now);
    // The pool reports the process's death (the bench's first process).
    let exited = Event::ProcessExited {
        request: RequestId(1),
        process: ProcessId(1),
        status: carmi_proto::msg::ExitStatus::Code(101),
        cpu_seconds: 0.0,
    };
    b.run.carmi_event(exited, b.now);
    b.drain();
    assert_eq!(b.run.next_deadline(), Some(secs(10.5)));
    b.at(10.4);
    let out = b.drain();
    assert!(to_master(&out, m).is_empty(), "{out:?}");
    b.at(10.5);
    let out = b.drain();
    assert!(
        to_master(&out, m)
            .iter()
            .any(|x| matches!(x, ToMaster::StepFailed { step, .. } if *step == StepId(7))),
        "{out:?}"
    );
}

#[test]
fn a_worker_back_within_the_grace_is_not_lost() {
    let (mut b, m, w, ticket) = one_step_running(1);
    b.at(10.0);
    b.run.worker_dropped(w, b.now);
    b.at(10.2);
    assert!(b.run.worker_connected(w, b.now));
    b.at(11.0);
    b.drain();
    b.result(w, ticket, "answer");
    let out = b.drain();
    assert_eq!(
        to_master(&out, m),
        vec![ToMaster::Result { step: StepId(7) }]
    );
}

/// Restores estimates for steps (seconds of work each) and runs one cycle
/// of them; the count the class holds after it.
fn cycle(b: &mut Bench, m: MasterId, n: u64, work: &[f64]) -> u32 {
    let saved: Vec<SavedEstimate> = work
        .iter()
        .enumerate()
        .map(|(i, w)| SavedEstimate {
            step: StepId(100 * n + i as u64),
            mean: *w,
            samples: 3,
        })
        .collect();
    let json = serde_json::to_string(&saved).unwrap();
    b.send(m, FromMaster::RestoreHistory, &json);
    b.send(m, FromMaster::BeginCycle { cycle: CycleId(n) }, "");
    for i in 0..work.len() {
        let step = StepId(100 * n + i as u64);
        b.send(m, FromMaster::Step { step }, "");
    }
    b.send(m, FromMaster::EndCycle { cycle: CycleId(n) }, "");
    b.drain();
    b.run.sched().status().wanted
}

#[test]
fn fewest_hosts_follows_a_change_of_one_only_after_two_cycles_in_a_row() {
    let mut b = Bench::new();
    let policies = Policies {
        fewest_hosts: Some(0.0),
        hysteresis: 2,
        ..Policies::default()
    };
    let m = b.master(init(&[("a", 3)], 3, policies), "");
    b.drain();
    assert_eq!(b.run.sched().status().wanted, 3);
    // 10 + (5, 5): two hosts end the cycle as soon as three would.
    assert_eq!(
        cycle(&mut b, m, 1, &[10.0, 5.0, 5.0]),
        3,
        "one answer is not enough"
    );
    assert_eq!(cycle(&mut b, m, 2, &[10.0, 10.0, 10.0]), 3, "three needed");
    assert_eq!(
        cycle(&mut b, m, 3, &[10.0, 5.0, 5.0]),
        3,
        "the streak restarted"
    );
    assert_eq!(cycle(&mut b, m, 4, &[10.0, 5.0, 5.0]), 2, "two in a row");
}

#[test]
fn retiring_a_master_frees_only_its_own_hosts_and_steps() {
    let mut b = Bench::new();
    let a = b.master(init(&[("a", 1)], 3, Policies::default()), "A");
    let m_b = b.master(init(&[("b", 1)], 3, Policies::default()), "B");
    b.drain();
    let wa = b.grant("a", 1);
    let wb = b.grant("b", 2);
    b.drain();
    b.send(a, FromMaster::Complete, "");
    let out = b.drain();
    let released: Vec<HostId> = out
        .iter()
        .filter_map(|o| match o {
            Output::Carmi {
                request: CarmiCall::DelHosts { hosts },
                ..
            } => Some(hosts.clone()),
            _ => None,
        })
        .flatten()
        .collect();
    assert_eq!(released, vec![HostId(1)], "{out:?}");
    assert!(matches!(to_master(&out, a).last(), Some(ToMaster::Stats)));
    assert!(
        to_worker(&out, wb).is_empty(),
        "B's worker keeps running: {out:?}"
    );
    assert!(!b.run.finished());
    // B's steps still run, on B's worker.
    b.send(m_b, FromMaster::Step { step: StepId(1) }, "s");
    let out = b.drain();
    assert_eq!(step_tickets(&out, wb).len(), 1, "{out:?}");
    assert!(step_tickets(&out, wa).is_empty());
    // The last master to retire stops every worker; the run ends when the
    // last connection goes.
    b.run.master_gone(m_b, None, b.now);
    let out = b.drain();
    assert!(to_worker(&out, wb).contains(&(ToWorker::Stop, String::new())));
    assert!(!b.run.finished());
    b.run.master_gone(a, None, b.now);
    assert!(b.run.finished());
}

#[test]
fn a_retired_masters_queued_steps_are_cancelled() {
    let mut b = Bench::new();
    let a = b.master(init(&[("a", 1)], 3, Policies::default()), "A");
    let m_b = b.master(init(&[], 3, Policies::default()), "B");
    b.drain();
    b.send(a, FromMaster::Step { step: StepId(1) }, "a1");
    b.send(m_b, FromMaster::Step { step: StepId(2) }, "b2");
    b.send(a, FromMaster::Complete, "");
    b.drain();
    // B still wants nothing, so its step waits; A's must never be sent.
    b.send(m_b, init(&[("a", 1)], 3, Policies::default()), "B");
    b.drain();
    let w = b.grant("a", 1);
    let out = b.drain();
    assert_eq!(
        step_tickets(&out, w)
            .into_iter()
            .map(|(_, s)| s)
            .collect::<Vec<_>>(),
        vec![StepId(2)],
        "{out:?}"
    );
}

#[test]
fn a_context_switch_sends_the_other_masters_init_and_cycle_data_first() {
    let mut b = Bench::new();
    let a = b.master(init(&[("a", 1)], 3, Policies::default()), "A-init");
    let m_b = b.master(init(&[], 3, Policies::default()), "B-init");
    b.drain();
    let w = b.grant("a", 1);
    b.send(a, FromMaster::BeginCycle { cycle: CycleId(1) }, "A-cycle");
    b.send(a, FromMaster::Step { step: StepId(1) }, "a1");
    let out = b.drain();
    let ticket = step_tickets(&out, w)[0].0;
    assert_eq!(
        to_worker(&out, w),
        vec![
            (ToWorker::Init, "A-init".into()),
            (ToWorker::BeginCycle { cycle: CycleId(1) }, "A-cycle".into()),
            (
                ToWorker::Step {
                    ticket,
                    step: StepId(1)
                },
                "a1".into()
            ),
        ]
    );
    b.send(m_b, FromMaster::BeginCycle { cycle: CycleId(5) }, "B-cycle");
    b.send(m_b, FromMaster::Step { step: StepId(2) }, "b2");
    let out = b.drain();
    // B's cycle start goes only to workers holding B's context: none yet.
    assert!(to_worker(&out, w).is_empty(), "{out:?}");
    b.result(w, ticket, "r1");
    let out = b.drain();
    let ticket2 = step_tickets(&out, w)[0].0;
    assert_eq!(
        to_worker(&out, w),
        vec![
            (ToWorker::Init, "B-init".into()),
            (ToWorker::BeginCycle { cycle: CycleId(5) }, "B-cycle".into()),
            (
                ToWorker::Step {
                    ticket: ticket2,
                    step: StepId(2)
                },
                "b2".into()
            ),
        ]
    );
    // Back to A: A's context again, then its step, in a fresh batch.
    b.send(a, FromMaster::Step { step: StepId(3) }, "a3");
    b.result(w, ticket2, "r2");
    let out = b.drain();
    let msgs: Vec<ToWorker> = to_worker(&out, w).into_iter().map(|(m, _)| m).collect();
    assert!(matches!(
        msgs.as_slice(),
        [
            ToWorker::Init,
            ToWorker::BeginCycle { .. },
            ToWorker::Step {
                step: StepId(3),
                ..
            }
        ]
    ));
}

#[test]
fn the_run_gives_up_when_no_master_connects_in_time() {
    let mut b = Bench::new();
    assert_eq!(b.run.next_deadline(), Some(secs(30.0)));
    b.at(29.0);
    b.drain();
    assert!(!b.run.finished());
    b.at(30.0);
    b.drain();
    assert!(b.run.finished());
}

/// Also with `keep_hosts` (which tops classes up at every tick): a pool
/// failing requests at once is not asked again before the retry delay.
#[test]
fn hosts_the_pool_cannot_serve_for_now_are_asked_for_again() {
    for policies in [Policies::default(), Policies::keep_hosts()] {
        let mut b = Bench::new();
        let m = b.master(init(&[("a", 2)], 3, policies), "");
        for step in 0..2 {
            b.send(m, FromMaster::Step { step: StepId(step) }, "s");
        }
        b.drain();
        let (request, _) = b
            .calls
            .iter()
            .find(|(_, c)| matches!(c, CarmiCall::AddHosts { .. }))
            .unwrap()
            .clone();
        let failure = Failure {
            code: FailureCode::Unavailable,
            message: "reconnecting".into(),
        };
        let add_hosts = |out: &[Output], count: u32| {
            out.iter().any(|o| {
                matches!(o, Output::Carmi { request: CarmiCall::AddHosts { count: c, .. }, .. } if *c == count)
            })
        };
        b.at(5.0);
        b.run.carmi_event(Event::Failed { request, failure }, b.now);
        let mut out = b.drain();
        b.at(5.5);
        out.extend(b.drain());
        assert!(!add_hosts(&out, 2), "{out:?}");
        assert_eq!(b.run.next_deadline(), Some(secs(6.0)));
        b.at(6.0);
        let out = b.drain();
        assert!(add_hosts(&out, 2), "{out:?}");
    }
}

#[test]
fn outputs_round_trip_through_serde() {
    let (mut b, _, w, ticket) = one_step_running(3);
    b.result(w, ticket, "r");
    let out = b.drain();
    assert!(!out.is_empty());
    let json = serde_json::to_string(&out).unwrap();
    let back: Vec<Output> = serde_json::from_str(&json).unwrap();
    assert_eq!(back, out);
}

#[test]
fn inputs_round_tripped_through_serde_drive_the_run_the_same() {
    // The same run twice: by method calls, and by `Input`s that went
    // through JSON (as a simulator's queue may carry them).
    let script = |b: &mut Bench, via_serde: bool| -> Vec<Output> {
        let give = |run: &mut Run, input: Input, now: Time| -> Taken {
            let input = if via_serde {
                serde_json::from_str(&serde_json::to_string(&input).unwrap()).unwrap()
            } else {
                input
            };
            run.handle(input, now)
        };
        let Taken::Master(m) = give(&mut b.run, Input::MasterConnected, b.now) else {
            panic!("a master id");
        };
        let init = init(&[("a", 1)], 3, Policies::default());
        let msg = Input::FromMaster {
            master: m,
            msg: init,
            payload: Bytes::from_static(b"i"),
        };
        give(&mut b.run, msg, b.now);
        let mut out = b.drain();
        b.grant("a", 1);
        let step = Input::FromMaster {
            master: m,
            msg: FromMaster::Step { step: StepId(4) },
            payload: Bytes::from_static(b"d"),
        };
        give(&mut b.run, step, b.now);
        give(&mut b.run, Input::Tick, b.now);
        out.extend(b.drain());
        let refused = give(
            &mut b.run,
            Input::WorkerConnected {
                worker: WorkerId(99),
            },
            b.now,
        );
        assert_eq!(refused, Taken::Refused);
        out
    };
    let plain = script(&mut Bench::new(), false);
    let serde = script(&mut Bench::new(), true);
    assert!(plain.iter().any(|o| matches!(
        o,
        Output::ToWorker {
            msg: ToWorker::Step { .. },
            ..
        }
    )));
    assert_eq!(plain, serde);
}

#[test]
fn the_masters_hear_of_a_changed_status_at_most_every_250_ms() {
    let mut b = Bench::new();
    b.at(0.1);
    let m = b.master(init(&[("a", 2)], 3, Policies::default()), "");
    let statuses = |out: &[Output]| -> Vec<Status> {
        to_master(out, m)
            .into_iter()
            .filter_map(|x| match x {
                ToMaster::Status(s) => Some(s),
                _ => None,
            })
            .collect()
    };
    assert!(statuses(&b.drain()).is_empty(), "held back until 250 ms");
    assert_eq!(b.run.next_deadline(), Some(secs(0.25)));
    b.at(0.25);
    let sent = statuses(&b.drain());
    assert_eq!(sent.len(), 1);
    assert_eq!(sent[0].wanted, 2);
    b.at(0.3);
    b.send(m, FromMaster::Step { step: StepId(1) }, "");
    assert!(statuses(&b.drain()).is_empty());
    assert_eq!(b.run.next_deadline(), Some(secs(0.5)));
    b.at(0.5);
    let sent = statuses(&b.drain());
    assert_eq!(sent.len(), 1);
    assert_eq!(sent[0].queued, 1);
    // Nothing changed: nothing sent, and no wake-up asked for (the next
    // one is the master timeout's, which a master already answered).
    b.at(0.8);
    assert!(statuses(&b.drain()).is_empty());
    assert_eq!(b.run.next_deadline(), Some(secs(30.0)));
}

#[path = "run_tests_classes.rs"]
mod classes;

#[test]
fn workers_that_keep_dying_before_connecting_end_the_run_with_the_reason() {
    let mut b = Bench::new();
    let m = b.master(init(&[("a", 1)], 3, Policies::default()), "init");
    b.drain();
    let (mut spawn, mut process, _) = b.grant_unconnected("a", 1);
    let mut next_host = 10;
    let mut deaths = 0;
    let mut fatal = None;
    while fatal.is_none() && deaths <= MAX_EARLY_DEATHS {
        let exited = Event::ProcessExited {
            request: spawn,
            process,
            status: carmi_proto::msg::ExitStatus::Code(1),
            cpu_seconds: 0.0,
        };
        b.run.carmi_event(exited, b.now);
        deaths += 1;
        // Past the loss grace: the scheduler spawns the next worker.
        b.at(deaths as f64);
        let out = b.drain();
        fatal = to_master(&out, m).into_iter().find_map(|x| match x {
            ToMaster::Fatal { reason } => Some(reason),
            _ => None,
        });
        (spawn, process) = b.start_next_worker(spawn, &mut next_host);
    }
    assert_eq!(deaths, MAX_EARLY_DEATHS);
    let reason = fatal.unwrap();
    assert!(
        reason.contains("10 workers in a row exited before connecting"),
        "{reason}"
    );
    assert!(reason.contains("Code(1)"), "{reason}");
}

#[test]
fn a_worker_that_connects_resets_the_count_of_early_deaths() {
    let mut b = Bench::new();
    let m = b.master(init(&[("a", 1), ("b", 1)], 3, Policies::default()), "init");
    b.drain();
    let (mut spawn, mut process, _) = b.grant_unconnected("a", 1);
    let mut next_host = 10;
    for i in 1..MAX_EARLY_DEATHS + 5 {
        let exited = Event::ProcessExited {
            request: spawn,
            process,
            status: carmi_proto::msg::ExitStatus::Code(1),
            cpu_seconds: 0.0,
        };
        b.run.carmi_event(exited, b.now);
        if i == MAX_EARLY_DEATHS - 1 {
            // Another class's worker starts fine: the executable works.
            b.grant("b", 2);
        }
        b.at(i as f64);
        let out = b.drain();
        assert!(
            !to_master(&out, m)
                .iter()
                .any(|x| matches!(x, ToMaster::Fatal { .. })),
            "death {i}: {out:?}"
        );
        (spawn, process) = b.start_next_worker(spawn, &mut next_host);
    }
}

#[path = "run_tests_partition.rs"]
mod partition;

#[path = "run_refused_tests.rs"]
mod refused;

#[path = "run_let_go_tests.rs"]
mod let_go;

#[path = "run_losses_tests.rs"]
mod losses;

#[path = "run_grow_tests.rs"]
mod grow;
