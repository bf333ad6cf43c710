//! Losses counted right: a spawn the pool cannot serve for now is no crash,
//! and a worker whose machine is declared lost after its loss grace does not
//! charge the step it was computing.

use carmi_proto::msg::ExitStatus;

use super::*;

/// The spawns on `host` among the run's CARMI calls after request `after`,
/// with the worker each starts.
fn spawns_on(b: &Bench, host: u64, after: RequestId) -> Vec<(RequestId, WorkerId)> {
    b.calls
        .iter()
        .filter_map(|(id, c)| match c {
            CarmiCall::Spawn { host: h, args, .. } if *id > after && *h == HostId(host) => {
                let arg = args.last().unwrap().strip_prefix(CONNECT_ARG).unwrap();
                Some((*id, parse_connect_arg(arg).unwrap().2))
            }
            _ => None,
        })
        .collect()
}

fn failed_steps(out: &[Output], m: MasterId) -> Vec<StepId> {
    to_master(out, m)
        .into_iter()
        .filter_map(|x| match x {
            ToMaster::StepFailed { step, .. } => Some(step),
            _ => None,
        })
        .collect()
}

fn exited(process: u64, status: ExitStatus) -> Event {
    Event::ProcessExited {
        request: RequestId(1),
        process: ProcessId(process),
        status,
        cpu_seconds: 0.0,
    }
}

#[test]
fn a_spawn_the_pool_cannot_serve_for_now_is_retried_after_the_delay_without_a_crash() {
    let mut b = Bench::new();
    let m = b.master(init(&[("a", 1)], 1, Policies::default()), "init");
    b.drain();
    b.send(m, FromMaster::Step { step: StepId(1) }, "data");
    b.drain();
    let ask = b
        .calls
        .iter()
        .find(|(_, c)| matches!(c, CarmiCall::AddHosts { .. }))
        .map(|(id, _)| *id)
        .unwrap();
    let info = HostInfo {
        host: HostId(3),
        name: "slot1@m3".into(),
        class: "a".into(),
        ad: String::new(),
    };
    let added = Event::HostsAdded {
        request: ask,
        hosts: vec![info],
        remaining: 0,
    };
    b.run.carmi_event(added, b.now);
    b.drain();
    let first = spawns_on(&b, 3, ask);
    assert_eq!(first.len(), 1, "{:?}", b.calls);
    let (mut spawn, worker) = first[0];
    // A global RM restart: more refusals in a row than `max_respawns` (3).
    for round in 1..=6 {
        let failure = Failure {
            code: FailureCode::Unavailable,
            message: "the local RM is reconnecting to the global RM".into(),
        };
        b.run.carmi_event(
            Event::Failed {
                request: spawn,
                failure,
            },
            b.now,
        );
        let out = b.drain();
        assert!(failed_steps(&out, m).is_empty(), "{out:?}");
        assert!(
            spawns_on(&b, 3, spawn).is_empty(),
            "round {round}: spawned again at once: {:?}",
            b.calls
        );
        // Not before the retry delay (1 s) either.
        b.at(round as f64 - 0.1);
        b.drain();
        assert!(spawns_on(&b, 3, spawn).is_empty(), "round {round}");
        b.at(round as f64);
        b.drain();
        let again = spawns_on(&b, 3, spawn);
        assert_eq!(again.len(), 1, "round {round}: {:?}", b.calls);
        // The same worker, on the same host: nothing was counted as crashed.
        assert_eq!(again[0].1, worker, "round {round}");
        spawn = again[0].0;
    }
    assert!(
        !b.calls
            .iter()
            .any(|(id, c)| *id > ask && matches!(c, CarmiCall::AddHosts { .. })),
        "the host was given up: {:?}",
        b.calls
    );
    // The pool is back: the worker starts and runs the step.
    let started = Event::ProcessStarted {
        request: spawn,
        process: ProcessId(9),
        host: HostId(3),
    };
    b.run.carmi_event(started, b.now);
    assert!(b.run.worker_connected(worker, b.now));
    let out = b.drain();
    assert_eq!(step_tickets(&out, worker).len(), 1, "{out:?}");
}

#[test]
fn a_machine_declared_lost_after_the_loss_grace_does_not_charge_its_step() {
    // One attempt allowed: a charge would fail the step for good.
    let (mut b, m, w, _) = one_step_running(1);
    b.at(10.0);
    b.run.worker_dropped(w, b.now);
    b.drain();
    // The grace ends with no word from the pool: the worker is lost and its
    // step goes back to the queue, uncharged.
    b.at(10.5);
    let out = b.drain();
    assert!(failed_steps(&out, m).is_empty(), "{out:?}");
    // Seconds later the pool declares the machine lost.
    b.at(13.0);
    b.run.carmi_event(exited(1, ExitStatus::HostLost), b.now);
    let deleted = Event::HostDeleted {
        request: RequestId(1),
        host: HostId(1),
        reason: "the machine of slot1@m1 stopped answering".into(),
    };
    b.run.carmi_event(deleted, b.now);
    let out = b.drain();
    assert!(failed_steps(&out, m).is_empty(), "{out:?}");
    let w2 = b.grant("a", 2);
    let out = b.drain();
    let resent = step_tickets(&out, w2);
    assert_eq!(resent.len(), 1, "{out:?}");
    assert_eq!(resent[0].1, StepId(7));
    b.result(w2, resent[0].0, "answer");
    let out = b.drain();
    assert_eq!(
        to_master(&out, m),
        vec![ToMaster::Result { step: StepId(7) }]
    );
}

#[test]
fn a_deletion_alone_after_the_grace_also_clears_the_charge() {
    let (mut b, m, w, _) = one_step_running(1);
    b.at(10.0);
    b.run.worker_dropped(w, b.now);
    b.at(10.5);
    b.drain();
    b.at(12.0);
    let deleted = Event::HostDeleted {
        request: RequestId(1),
        host: HostId(1),
        reason: "the machine of slot1@m1 stopped answering".into(),
    };
    b.run.carmi_event(deleted, b.now);
    // Its process's exit, reported after the deletion, is no crash either.
    b.run.carmi_event(exited(1, ExitStatus::Code(1)), b.now);
    let out = b.drain();
    assert!(failed_steps(&out, m).is_empty(), "{out:?}");
}

#[test]
fn a_crash_the_pool_reports_after_the_grace_is_charged() {
    let (mut b, m, w, _) = one_step_running(1);
    b.at(10.0);
    b.run.worker_dropped(w, b.now);
    b.at(10.5);
    let out = b.drain();
    assert!(failed_steps(&out, m).is_empty(), "{out:?}");
    b.at(10.8);
    b.run.carmi_event(exited(1, ExitStatus::Signal(11)), b.now);
    let out = b.drain();
    assert_eq!(failed_steps(&out, m), vec![StepId(7)], "{out:?}");
}

#[test]
fn a_pool_kill_reported_after_the_grace_is_not_charged() {
    let (mut b, m, w, _) = one_step_running(1);
    b.at(10.0);
    b.run.worker_dropped(w, b.now);
    b.at(10.5);
    b.drain();
    b.at(10.8);
    b.run.carmi_event(exited(1, ExitStatus::Signal(15)), b.now);
    let out = b.drain();
    assert!(failed_steps(&out, m).is_empty(), "{out:?}");
}
