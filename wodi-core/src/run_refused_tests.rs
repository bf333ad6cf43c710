//! A spawn the pool refuses because the host is not the run's (a restarted
//! global RM that forgot a grant): no storm of spawns on that host.

use super::*;

/// The spawns on `host` among the run's CARMI calls after request `after`.
fn spawns_on(b: &Bench, host: u64, after: RequestId) -> Vec<RequestId> {
    b.calls
        .iter()
        .filter(|(id, c)| {
            *id > after && matches!(c, CarmiCall::Spawn { host: h, .. } if *h == HostId(host))
        })
        .map(|(id, _)| *id)
        .collect()
}

/// Whether the run asked for hosts after request `after`.
fn asked_for_hosts(b: &Bench, after: RequestId) -> bool {
    b.calls
        .iter()
        .any(|(id, c)| *id > after && matches!(c, CarmiCall::AddHosts { .. }))
}

#[test]
fn a_spawn_refused_as_not_our_host_drops_the_host_and_asks_again_only_after_the_retry_delay() {
    let mut b = Bench::new();
    let m = b.master(init(&[("a", 1)], 1, Policies::default()), "init");
    b.drain();
    b.send(m, FromMaster::Step { step: StepId(1) }, "data");
    b.drain();
    // Host 3 is granted and a worker spawned on it; the pool then refuses
    // the spawn: it does not count host 3 as the job's.
    let info = HostInfo {
        host: HostId(3),
        name: "slot1@m3".into(),
        class: "a".into(),
        ad: String::new(),
    };
    let request = b
        .calls
        .iter()
        .find(|(_, c)| matches!(c, CarmiCall::AddHosts { .. }))
        .map(|(id, _)| *id)
        .unwrap();
    let added = Event::HostsAdded {
        request,
        hosts: vec![info],
        remaining: 0,
    };
    b.run.carmi_event(added, b.now);
    b.drain();
    let first = spawns_on(&b, 3, request);
    assert_eq!(first.len(), 1, "one worker spawned on host 3");
    let mark = *first.last().unwrap();
    for _ in 0..50 {
        let Some(spawn) = spawns_on(&b, 3, RequestId(0)).last().copied() else {
            break;
        };
        let failure = Failure {
            code: FailureCode::NotYourHost,
            message: "host h3 is not allocated to job j1".into(),
        };
        b.run.carmi_event(
            Event::Failed {
                request: spawn,
                failure,
            },
            b.now,
        );
        b.drain();
        if spawns_on(&b, 3, spawn).is_empty() {
            break;
        }
    }
    // At the same instant: no spawn on host 3 again, no new request for hosts.
    assert!(spawns_on(&b, 3, mark).is_empty(), "{:?}", b.calls);
    assert!(!asked_for_hosts(&b, mark), "{:?}", b.calls);
    // The step was not counted as crashing its worker (one attempt allowed).
    let out = b.drain();
    assert!(
        !to_master(&out, m)
            .iter()
            .any(|x| matches!(x, ToMaster::StepFailed { .. } | ToMaster::Fatal { .. })),
        "{out:?}"
    );
    // After the retry delay the class is asked for again, and a host the
    // pool grants then runs the step.
    b.at(1.0);
    b.drain();
    assert!(asked_for_hosts(&b, mark), "{:?}", b.calls);
    let w = b.grant("a", 4);
    let out = b.drain();
    assert_eq!(step_tickets(&out, w).len(), 1, "{out:?}");
}
