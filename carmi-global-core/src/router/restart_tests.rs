//! A restart of the global RM that keeps everything (issue 15 item 3), at
//! the router: the journal as written, and compacted, replayed into a new
//! router; its machines register again and its processes attach again.
//! Hosts held with or without processes, requests still outstanding
//! (served again, or failed naming them when journaled without their body),
//! lookups waiting for a process, and exclusions all survive.

use std::time::Duration;

use carmi_proto::ids::{ConnId, HostId, JobId, ProcessId, RequestId};
use carmi_proto::msg::{Event, FailureCode, FromGlobal, Reply, Request, SpawnTarget, ToGlobal};

use super::hand_tests::{CONN, advertise, request, step, worker_exe};
use super::{LinkId, Router, RouterConfig};
use crate::journal::{self, Record};

/// The link of machine `m{i}`.
pub(super) fn link(i: usize) -> LinkId {
    LinkId(i as u64 + 1)
}

pub(super) fn attach(process: Option<ProcessId>) -> ToGlobal {
    ToGlobal::AppAttach {
        conn: CONN,
        job: process.map(|_| JobId(1)),
        process,
        endpoint: "127.0.0.1:1".into(),
        token: None,
    }
}

/// `n` one-slot machines `m0`... and a job started by hand at `m0` with
/// class `any`: the router, the journal so far and the root process.
pub(super) fn pool_and_job(n: usize) -> (Router, Vec<Record>, ProcessId) {
    let mut r = Router::new(RouterConfig::default());
    let mut journal = Vec::new();
    for i in 0..n {
        journal.extend(advertise(&mut r, link(i), &format!("m{i}"), vec![]));
    }
    r.on_executable_stored(&worker_exe());
    let (sends, records) = step(&mut r, |r| {
        r.on_message(link(0), attach(None), Duration::ZERO)
    });
    let Some((_, FromGlobal::Attached { process: root, .. })) = sends.first() else {
        panic!("{sends:?}");
    };
    let root = *root;
    journal.extend(records);
    let define = Request::DefineClass {
        name: "any".into(),
        expression: "true".into(),
        rank: None,
        replace: false,
    };
    journal.extend(request(&mut r, link(0), 1, define));
    (r, journal, root)
}

/// The root asks for one host of `any` (request 2) and spawns a worker
/// there (request 3), both journaled: the worker and its host.
pub(super) fn spawn_one_worker(r: &mut Router, journal: &mut Vec<Record>) -> (ProcessId, HostId) {
    let add = Request::AddHosts {
        class: "any".into(),
        count: 1,
        increment: 1,
    };
    journal.extend(ask(r, 2, add).1);
    let spawn = Request::ClassSpawn {
        executable: worker_exe(),
        args: vec![],
        target: SpawnTarget::Class("any".into()),
        output: Default::default(),
    };
    let (_, records) = ask(r, 3, spawn);
    let (worker, host) = match &records[..] {
        [Record::Spawned { process, host, .. }] => (*process, *host),
        other => panic!("{other:?}"),
    };
    journal.extend(records);
    (worker, host)
}

/// Sends one forwarded request of the root; its sends and records.
pub(super) fn ask(
    r: &mut Router,
    id: u64,
    body: Request,
) -> (Vec<(LinkId, FromGlobal)>, Vec<Record>) {
    let msg = ToGlobal::Forward {
        conn: CONN,
        id: RequestId(id),
        body,
    };
    step(r, |r| r.on_message(link(0), msg, Duration::ZERO))
}

/// The events delivered at `conn` among `sends`.
pub(super) fn events_at(conn: ConnId, sends: &[(LinkId, FromGlobal)]) -> Vec<Event> {
    sends
        .iter()
        .filter_map(|(_, m)| match m {
            FromGlobal::Deliver { conn: c, event } if *c == conn => Some(event.clone()),
            _ => None,
        })
        .collect()
}

/// The hosts of `HostsAdded` events for request `id`, and the last `remaining`.
pub(super) fn added(events: &[Event], id: u64) -> (Vec<HostId>, Option<u32>) {
    let mut hosts = Vec::new();
    let mut left = None;
    for e in events {
        if let Event::HostsAdded {
            request,
            hosts: h,
            remaining,
        } = e
            && request.0 == id
        {
            hosts.extend(h.iter().map(|h| h.host));
            left = Some(*remaining);
        }
    }
    (hosts, left)
}

/// New routers from `journal` as written and compacted, each with machines
/// `m0`..`m{n-1}` registered again (`running` says what each still runs)
/// and the root attached again; with the root's events at its attach and
/// the records written then.
pub(super) fn restarted(
    journal: &[Record],
    n: usize,
    root: ProcessId,
    running: impl Fn(usize) -> Vec<ProcessId>,
) -> Vec<(Router, Vec<Event>, Vec<Record>)> {
    let compacted = journal::Live::of(journal).records();
    [journal.to_vec(), compacted]
        .into_iter()
        .map(|journal| {
            let mut r = Router::new(RouterConfig::default());
            r.recover(journal);
            for i in 0..n {
                advertise(&mut r, link(i), &format!("m{i}"), running(i));
            }
            let (sends, records) = step(&mut r, |r| {
                r.on_message(link(0), attach(Some(root)), Duration::ZERO)
            });
            let events = events_at(CONN, &sends);
            (r, events, records)
        })
        .collect()
}

/// Gap (a): the job fell from 3 hosts to 2 when one ran no process.
#[test]
fn hosts_a_job_held_without_processes_are_its_own_again_after_a_restart() {
    let (mut r, mut journal, root) = pool_and_job(5);
    let add = Request::AddHosts {
        class: "any".into(),
        count: 4,
        increment: 4,
    };
    let (sends, records) = ask(&mut r, 2, add);
    let (mut held, left) = added(&events_at(CONN, &sends), 2);
    assert_eq!((held.len(), left), (4, Some(0)));
    let claimed = records
        .iter()
        .filter(|r| matches!(r, Record::Claimed { job: JobId(1), class, .. } if class == "any"))
        .count();
    assert_eq!(claimed, 4, "{records:?}");
    journal.extend(records);
    // One goes back: it is not the job's after the restart either.
    let given_back = held.remove(0);
    let (_, records) = ask(
        &mut r,
        3,
        Request::DelHosts {
            hosts: vec![given_back],
        },
    );
    assert!(
        records.contains(&Record::Freed {
            job: JobId(1),
            host: given_back
        }),
        "{records:?}"
    );
    journal.extend(records);
    held.sort();
    for (mut r, events, records) in restarted(&journal, 5, root, |_| vec![]) {
        assert!(events.is_empty(), "nothing to tell: {events:?}");
        assert!(records.is_empty(), "{records:?}");
        let mut now = r.allocator().job_hosts(JobId(1));
        now.sort();
        assert_eq!(now, held);
        // The free hosts are the two others; the job's are not granted again.
        let (sends, _) = ask(
            &mut r,
            4,
            Request::AddHosts {
                class: "any".into(),
                count: 2,
                increment: 2,
            },
        );
        let (more, left) = added(&events_at(CONN, &sends), 4);
        assert_eq!(left, Some(0));
        assert!(more.contains(&given_back), "{more:?}");
        assert!(more.iter().all(|h| !held.contains(h)), "{more:?} {held:?}");
    }
}

/// The journal of a job at `m0` of a pool of two machines, `m1` excluded
/// from its class, with an `AddHosts` of 5 (r3) granted one host and an
/// `AddNotify` (r4) outstanding.
fn outstanding_journal() -> (Vec<Record>, ProcessId, HostId) {
    let (mut r, mut journal, root) = pool_and_job(2);
    let m1_host = r.allocator().machine_hosts("m1")[0];
    let exclude = Request::ExcludeHosts {
        class: "any".into(),
        hosts: vec![m1_host],
    };
    journal.extend(ask(&mut r, 2, exclude).1);
    let add = Request::AddHosts {
        class: "any".into(),
        count: 5,
        increment: 1,
    };
    let (sends, records) = ask(&mut r, 3, add);
    let (hosts, left) = added(&events_at(CONN, &sends), 3);
    assert_eq!(left, Some(4));
    journal.extend(records);
    let notify = Request::AddNotify {
        class: "any".into(),
    };
    journal.extend(ask(&mut r, 4, notify).1);
    // Answered at once: never outstanding.
    journal.extend(ask(&mut r, 5, Request::Config).1);
    (journal, root, hosts[0])
}

/// Gap (b): an `AddHosts` still waiting and a subscription are served again
/// after a restart, as if nothing happened: the hosts still to come, and
/// the subscription's notices, without a second acceptance.
#[test]
fn outstanding_requests_are_served_again_after_a_restart_and_exclusions_are_kept() {
    let (journal, root, m0_host) = outstanding_journal();
    let outstanding: Vec<(u64, Option<Request>)> = journal
        .iter()
        .filter_map(|rec| match rec {
            Record::Outstanding { request, body, .. } => {
                Some((request.0, body.clone().map(|b| *b)))
            }
            _ => None,
        })
        .collect();
    let add = |count| Request::AddHosts {
        class: "any".into(),
        count,
        increment: 1,
    };
    let notify = Request::AddNotify {
        class: "any".into(),
    };
    // Once when accepted, once more after its first grant: 4 still to come.
    assert_eq!(
        outstanding,
        [
            (3, Some(add(5))),
            (3, Some(add(4))),
            (4, Some(notify.clone()))
        ]
    );
    for (mut r, events, records) in restarted(&journal, 2, root, |_| vec![]) {
        assert!(
            events.is_empty(),
            "no failure, no second acceptance: {events:?}"
        );
        let again: Vec<u64> = records
            .iter()
            .filter_map(|rec| match rec {
                Record::Outstanding { request, .. } => Some(request.0),
                Record::Answered { request, .. } => panic!("r{request} ended: {records:?}"),
                _ => None,
            })
            .collect();
        assert_eq!(again, [3, 4]);
        assert_eq!(r.allocator().job_hosts(JobId(1)), [m0_host]);
        // The exclusion survived.
        let (sends, _) = ask(&mut r, 6, Request::GetClassDefinitions);
        assert!(
            events_at(CONN, &sends).iter().any(|e| matches!(e,
                Event::Done { reply: Reply::Classes(c), .. }
                    if c.iter().any(|c| c.name == "any" && c.excluded == ["m1"]))),
            "{sends:?}"
        );
        // A new machine: the AddHosts gets it (3 to come) and the subscription tells of it.
        let (sends, mut records) = step(&mut r, |r| {
            r.on_link_opened(
                link(2),
                carmi_proto::msg::Role::Local { name: "m2".into() },
                Duration::ZERO,
            );
            r.on_message(
                link(2),
                ToGlobal::Advertise {
                    ad: "[ Name = \"m2\"; Arch = \"X86_64\" ]".into(),
                    slots: 1,
                    running: vec![],
                },
                Duration::ZERO,
            );
        });
        let events = events_at(CONN, &sends);
        let m2_host = r.allocator().machine_hosts("m2")[0];
        assert_eq!(added(&events, 3), (vec![m2_host], Some(3)));
        assert_eq!(added(&events, 4), (vec![m2_host], Some(0)));
        // A second restart asks for the 3 still to come, keeping both hosts.
        let mut all = journal.clone();
        all.append(&mut records);
        let mut r2 = Router::new(RouterConfig::default());
        r2.recover(all);
        for i in 0..3 {
            advertise(&mut r2, link(i), &format!("m{i}"), vec![]);
        }
        let (sends, records) = step(&mut r2, |r| {
            r.on_message(link(0), attach(Some(root)), Duration::ZERO)
        });
        assert!(events_at(CONN, &sends).is_empty(), "{sends:?}");
        assert!(
            records.iter().any(|rec| matches!(rec,
                Record::Outstanding { request: RequestId(3), body: Some(b), .. } if **b == add(3))),
            "{records:?}"
        );
        let mut hosts = r2.allocator().job_hosts(JobId(1));
        hosts.sort();
        assert_eq!(hosts, [m0_host, m2_host]);
    }
}

/// A journal written before requests kept their body: they fail, naming
/// them, once; a second restart tells nothing again.
#[test]
fn a_request_journaled_without_its_body_fails_naming_it() {
    let (journal, root, _) = outstanding_journal();
    let old: Vec<Record> = journal
        .into_iter()
        .map(|rec| match rec {
            Record::Outstanding {
                job,
                process,
                request,
                what,
                ..
            } => Record::Outstanding {
                job,
                process,
                request,
                what,
                body: None,
            },
            other => other,
        })
        .collect();
    for (_, events, records) in restarted(&old, 2, root, |_| vec![]) {
        let failed: Vec<(u64, FailureCode, String)> = events
            .iter()
            .filter_map(|e| match e {
                Event::Failed { request, failure } => {
                    Some((request.0, failure.code, failure.message.clone()))
                }
                _ => None,
            })
            .collect();
        assert_eq!(
            failed,
            [
                (
                    3,
                    FailureCode::Unavailable,
                    "the global RM restarted and lost request r3 (AddHosts of 5 host(s) of class `any`); send it again".to_string()
                ),
                (
                    4,
                    FailureCode::Unavailable,
                    "the global RM restarted and lost request r4 (AddNotify of class `any`); send it again".to_string()
                ),
            ]
        );
        assert_eq!(
            records,
            [
                Record::Answered {
                    process: root,
                    request: RequestId(3)
                },
                Record::Answered {
                    process: root,
                    request: RequestId(4)
                }
            ]
        );
        let mut all = old.clone();
        all.extend(records);
        for (_, events, _) in restarted(&all, 2, root, |_| vec![]) {
            assert!(events.is_empty(), "{events:?}");
        }
    }
}

/// Gap (c): a `LookupProcess` waiting for a worker to connect when the
/// global RM is killed is answered once the worker connects to the
/// restarted one, whichever of the two attaches first.
#[test]
fn a_lookup_waiting_for_a_process_is_answered_after_a_restart() {
    let (mut r, mut journal, root) = pool_and_job(2);
    let (worker, host) = spawn_one_worker(&mut r, &mut journal);
    let at = if r.allocator().host_machine(host) == Some("m0") {
        0
    } else {
        1
    };
    let started = ToGlobal::Started {
        process: worker,
        result: Ok(()),
    };
    journal.extend(step(&mut r, |r| r.on_message(link(at), started, Duration::ZERO)).1);
    let (sends, records) = ask(&mut r, 4, Request::LookupProcess { process: worker });
    assert!(events_at(CONN, &sends).is_empty(), "it waits: {sends:?}");
    assert!(
        records.iter().any(|rec| matches!(
            rec,
            Record::Outstanding {
                request: RequestId(4),
                ..
            }
        )),
        "{records:?}"
    );
    journal.extend(records);
    let running = |i: usize| if i == at { vec![worker] } else { vec![] };
    let worker_conn = ConnId(10);
    let worker_attach = ToGlobal::AppAttach {
        conn: worker_conn,
        job: Some(JobId(1)),
        process: Some(worker),
        endpoint: "127.0.0.1:2".into(),
        token: None,
    };
    let answer = Event::Done {
        request: RequestId(4),
        reply: Reply::Endpoint {
            process: worker,
            address: "127.0.0.1:2".into(),
        },
    };
    // The root first (in `restarted`), then the worker.
    for (mut r, events, _) in restarted(&journal, 2, root, running) {
        assert!(events.is_empty(), "{events:?}");
        let (sends, records) = step(&mut r, |r| {
            r.on_message(link(at), worker_attach.clone(), Duration::ZERO)
        });
        assert_eq!(events_at(CONN, &sends), std::slice::from_ref(&answer));
        assert!(
            records.contains(&Record::Answered {
                process: root,
                request: RequestId(4)
            }),
            "{records:?}"
        );
    }
    // The worker first, then the root.
    let mut r = Router::new(RouterConfig::default());
    r.recover(journal);
    for i in 0..2 {
        advertise(&mut r, link(i), &format!("m{i}"), running(i));
    }
    step(&mut r, |r| {
        r.on_message(link(at), worker_attach, Duration::ZERO)
    });
    let (sends, _) = step(&mut r, |r| {
        r.on_message(link(0), attach(Some(root)), Duration::ZERO)
    });
    assert_eq!(events_at(CONN, &sends), [answer]);
}

/// A host of a `DeleteNotify` whose machine is not back when the process
/// attaches again is told as deleted, once, and is not given back silently
/// when its machine returns; the other stays watched.
#[test]
fn a_delete_notify_tells_of_a_host_that_did_not_come_back() {
    let (mut r, mut journal, root) = pool_and_job(3);
    let add = Request::AddHosts {
        class: "any".into(),
        count: 2,
        increment: 2,
    };
    let (sends, records) = ask(&mut r, 2, add);
    let (hosts, _) = added(&events_at(CONN, &sends), 2);
    journal.extend(records);
    let (sends, records) = ask(
        &mut r,
        3,
        Request::DeleteNotify {
            hosts: hosts.clone(),
        },
    );
    assert!(matches!(&events_at(CONN, &sends)[..], [Event::Done { .. }]));
    journal.extend(records);
    let machine_of = |h: HostId| {
        (0..3)
            .find(|&i| r.allocator().machine_hosts(&format!("m{i}")).contains(&h))
            .expect("a machine")
    };
    // The one away is not the root's own machine (m0), where it attaches.
    let (gone, kept) = if machine_of(hosts[0]) != 0 {
        (hosts[0], hosts[1])
    } else {
        (hosts[1], hosts[0])
    };
    let away = machine_of(gone);
    for journal in [journal.clone(), journal::Live::of(&journal).records()] {
        let mut r = Router::new(RouterConfig::default());
        r.recover(journal);
        for i in (0..3).filter(|&i| i != away) {
            advertise(&mut r, link(i), &format!("m{i}"), vec![]);
        }
        let (sends, _) = step(&mut r, |r| {
            r.on_message(link(0), attach(Some(root)), Duration::ZERO)
        });
        let events = events_at(CONN, &sends);
        assert!(
            matches!(&events[..], [Event::HostDeleted { request: RequestId(3), host, reason }]
                if *host == gone && reason.contains("left the job while the global RM restarted")),
            "{events:?}"
        );
        advertise(&mut r, link(away), &format!("m{away}"), vec![]);
        assert_eq!(r.allocator().job_hosts(JobId(1)), [kept]);
        let (sends, _) = ask(&mut r, 4, Request::DelHosts { hosts: vec![kept] });
        let events = events_at(CONN, &sends);
        assert!(
            events.iter().any(|e| matches!(e,
                Event::HostDeleted { request: RequestId(3), host, .. } if *host == kept)),
            "{events:?}"
        );
    }
}

/// Requests forwarded before the restart that the killed global RM never
/// read (the local RM names them after re-announcing the process) fail,
/// naming them; one served again after the restart is left alone.
#[test]
fn requests_the_killed_global_rm_never_read_fail_naming_them() {
    let (journal, root, _) = outstanding_journal();
    for (mut r, events, _) in restarted(&journal, 2, root, |_| vec![]) {
        assert!(events.is_empty(), "{events:?}");
        // r3 (AddHosts) is served again; r9 and r10 never reached the journal.
        let unanswered = ToGlobal::Unanswered {
            conn: CONN,
            requests: vec![RequestId(3), RequestId(9), RequestId(10)],
        };
        let (sends, _) = step(&mut r, |r| {
            r.on_message(link(0), unanswered, Duration::ZERO)
        });
        let failed: Vec<(u64, FailureCode, String)> = events_at(CONN, &sends)
            .into_iter()
            .map(|e| match e {
                Event::Failed { request, failure } => (request.0, failure.code, failure.message),
                other => panic!("{other:?}"),
            })
            .collect();
        let message = |id| {
            format!(
                "the link to the global RM broke (it restarted or was unreachable) before request r{id} was answered; send it again"
            )
        };
        assert_eq!(
            failed,
            [
                (9, FailureCode::Unavailable, message(9)),
                (10, FailureCode::Unavailable, message(10))
            ]
        );
    }
}
