//! Jobs started by hand (a root process attaching with no job) in the
//! journal: after a restart they keep their id, classes and workers, and one
//! whose root does not come back with its machine ends.

use std::time::Duration;

use carmi_proto::ids::{ConnId, HostId, JobId, ProcessId, RequestId};
use carmi_proto::msg::{ExecutableRef, FromGlobal, Request, Role, SpawnTarget, ToGlobal};

use super::{LinkId, Output, Router, RouterConfig};
use crate::journal::{self, Record};

pub(super) const CONN: ConnId = ConnId(9);

pub(super) fn worker_exe() -> ExecutableRef {
    ExecutableRef {
        name: "worker".into(),
        sha256: "ab".repeat(32),
        size: 10,
    }
}

/// Runs one input; the sends and journal records (through their encoding), invariants checked.
pub(super) fn step(
    r: &mut Router,
    f: impl FnOnce(&mut Router),
) -> (Vec<(LinkId, FromGlobal)>, Vec<Record>) {
    f(r);
    r.sanity_check();
    let (mut sends, mut records) = (Vec::new(), Vec::new());
    for o in r.take_outputs() {
        match o {
            Output::Send { link, msg } => sends.push((link, msg)),
            Output::Journal(rec) => {
                let (back, damage) = journal::parse(journal::encode(&rec).as_bytes());
                assert_eq!((back, damage), (vec![rec.clone()], None));
                records.push(rec);
            }
            Output::Close { .. }
            | Output::DropFiles { .. }
            | Output::SendFiles { .. }
            | Output::SaveCheckpoint { .. }
            | Output::DropStored { .. }
            | Output::Pilot(_) => {}
        }
    }
    (sends, records)
}

pub(super) fn advertise(
    r: &mut Router,
    link: LinkId,
    name: &str,
    running: Vec<ProcessId>,
) -> Vec<Record> {
    step(r, |r| {
        r.on_link_opened(link, Role::Local { name: name.into() }, Duration::ZERO)
    });
    let msg = ToGlobal::Advertise {
        ad: format!("[ Name = \"{name}\"; Arch = \"X86_64\" ]"),
        slots: 1,
        running,
    };
    let (sends, records) = step(r, |r| r.on_message(link, msg, Duration::ZERO));
    assert!(
        !sends
            .iter()
            .any(|(_, m)| matches!(m, FromGlobal::Kill { .. })),
        "nothing is killed at registration: {sends:?}"
    );
    records
}

pub(super) fn request(r: &mut Router, link: LinkId, id: u64, body: Request) -> Vec<Record> {
    let msg = ToGlobal::Forward {
        conn: CONN,
        id: RequestId(id),
        body,
    };
    step(r, |r| r.on_message(link, msg, Duration::ZERO)).1
}

pub(super) fn heartbeat(r: &mut Router, link: LinkId) -> (Vec<(LinkId, FromGlobal)>, Vec<Record>) {
    let hb = ToGlobal::Heartbeat {
        update: String::new(),
    };
    step(r, |r| r.on_message(link, hb, Duration::ZERO))
}

/// A hand-started job at m0 with a worker on one host; the journal so far,
/// the root, the worker, its host and the link of its machine.
fn hand_started_job() -> (Vec<Record>, ProcessId, ProcessId, HostId, LinkId) {
    let (m0, m1) = (LinkId(1), LinkId(2));
    let mut r = Router::new(RouterConfig::default());
    let mut journal = Vec::new();
    journal.extend(advertise(&mut r, m0, "m0", vec![]));
    journal.extend(advertise(&mut r, m1, "m1", vec![]));
    r.on_executable_stored(&worker_exe());
    let attach = ToGlobal::AppAttach {
        conn: CONN,
        job: None,
        process: None,
        endpoint: "127.0.0.1:1".into(),
        token: None,
    };
    let (sends, records) = step(&mut r, |r| r.on_message(m0, attach, Duration::ZERO));
    let root = match &sends[..] {
        [
            (
                _,
                FromGlobal::Attached {
                    job: JobId(1),
                    process,
                    ..
                },
            ),
        ] => *process,
        other => panic!("{other:?}"),
    };
    assert_eq!(
        records,
        [Record::Attached {
            job: JobId(1),
            machine: "m0".into(),
            root,
            owner: None,
        }]
    );
    journal.extend(records);
    let define = Request::DefineClass {
        name: "any".into(),
        expression: "true".into(),
        rank: None,
        replace: false,
    };
    journal.extend(request(&mut r, m0, 1, define));
    let add = Request::AddHosts {
        class: "any".into(),
        count: 1,
        increment: 1,
    };
    journal.extend(request(&mut r, m0, 2, add));
    let spawn = Request::ClassSpawn {
        executable: worker_exe(),
        args: vec![],
        target: SpawnTarget::Class("any".into()),
        output: Default::default(),
    };
    let records = request(&mut r, m0, 3, spawn);
    let (worker, host) = match &records[..] {
        [Record::Spawned { process, host, .. }] => (*process, *host),
        other => panic!("{other:?}"),
    };
    journal.extend(records);
    let link = if r.allocator().host_machine(host) == Some("m0") {
        m0
    } else {
        m1
    };
    (journal, root, worker, host, link)
}

#[test]
fn a_hand_started_job_keeps_its_id_class_and_worker_after_a_restart() {
    let (journal, root, worker, host, worker_link) = hand_started_job();
    let compacted = journal::Live::of(&journal).records();
    for journal in [journal.clone(), compacted] {
        let mut r = Router::new(RouterConfig::default());
        r.recover(journal);
        let (m0, m1) = (LinkId(1), LinkId(2));
        for (link, name) in [(m0, "m0"), (m1, "m1")] {
            let running = if link == worker_link {
                vec![worker]
            } else {
                vec![]
            };
            advertise(&mut r, link, name, running);
        }
        // m0 announces the root again, as its local RM does after `Registered`.
        let attach = ToGlobal::AppAttach {
            conn: CONN,
            job: Some(JobId(1)),
            process: Some(root),
            endpoint: "127.0.0.1:1".into(),
            token: None,
        };
        let (sends, records) = step(&mut r, |r| r.on_message(m0, attach, Duration::ZERO));
        assert!(records.is_empty(), "{records:?}");
        assert!(
            sends.iter().any(|(_, m)| *m
                == FromGlobal::Attached {
                    conn: CONN,
                    job: JobId(1),
                    process: root
                }),
            "{sends:?}"
        );
        let (sends, records) = heartbeat(&mut r, m0);
        assert!(
            records.is_empty() && sends.is_empty(),
            "{records:?} {sends:?}"
        );
        assert_eq!(r.allocator().job_hosts(JobId(1)), vec![host]);
        assert!(r.processes().find(worker).is_some_and(|p| p.is_live()));
        // Its class is back: another host of it can be asked for.
        let add = Request::AddHosts {
            class: "any".into(),
            count: 1,
            increment: 1,
        };
        request(&mut r, m0, 4, add);
        assert_eq!(r.allocator().job_hosts(JobId(1)).len(), 2);
        // The root leaves: the job ends, in the journal too, and its worker is killed.
        let detach = ToGlobal::AppDetach { conn: CONN };
        let (sends, records) = step(&mut r, |r| r.on_message(m0, detach, Duration::ZERO));
        assert!(
            records.contains(&Record::Ended { job: JobId(1) }),
            "{records:?}"
        );
        assert!(
            sends
                .iter()
                .any(|(_, m)| *m == FromGlobal::Kill { process: worker }),
            "{sends:?}"
        );
        assert!(!r.allocator().has_job(JobId(1)));
    }
}

#[test]
fn a_hand_started_job_whose_root_does_not_come_back_ends() {
    let (journal, _root, worker, _host, worker_link) = hand_started_job();
    let mut r = Router::new(RouterConfig::default());
    r.recover(journal);
    let (m0, m1) = (LinkId(1), LinkId(2));
    for (link, name) in [(m1, "m1"), (m0, "m0")] {
        let running = if link == worker_link {
            vec![worker]
        } else {
            vec![]
        };
        advertise(&mut r, link, name, running);
    }
    assert!(r.allocator().has_job(JobId(1)), "not before m0's heartbeat");
    let (sends, records) = heartbeat(&mut r, m0);
    assert_eq!(records, [Record::Ended { job: JobId(1) }]);
    assert!(
        sends
            .iter()
            .any(|(_, m)| *m == FromGlobal::Kill { process: worker }),
        "{sends:?}"
    );
    assert!(!r.allocator().has_job(JobId(1)));
}

#[test]
fn a_hand_started_job_whose_root_declared_its_exit_code_ends_completed() {
    use carmi_proto::msg::{ExitStatus, JobEnd};
    let cases = [
        (Some("0"), JobEnd::Completed(ExitStatus::Code(0))),
        (Some("3"), JobEnd::Completed(ExitStatus::Code(3))),
        // Not an integer: no word on how it ended.
        (Some("\"done\""), JobEnd::Detached),
        (None, JobEnd::Detached),
    ];
    for (declared, expected) in cases {
        let m0 = LinkId(1);
        let mut r = Router::new(RouterConfig::default());
        advertise(&mut r, m0, "m0", vec![]);
        let attach = ToGlobal::AppAttach {
            conn: CONN,
            job: None,
            process: None,
            endpoint: "127.0.0.1:1".into(),
            token: None,
        };
        step(&mut r, |r| r.on_message(m0, attach, Duration::ZERO));
        if let Some(code) = declared {
            let attrs = vec![("ExitCode".to_string(), code.to_string())];
            request(&mut r, m0, 1, Request::SetJobAttrs { attrs });
        }
        let detach = ToGlobal::AppDetach { conn: CONN };
        let (_, records) = step(&mut r, |r| r.on_message(m0, detach, Duration::ZERO));
        let ends: Vec<JobEnd> = records
            .iter()
            .filter_map(|rec| match rec {
                Record::History(h) => Some(h.end.clone()),
                _ => None,
            })
            .collect();
        assert_eq!(ends, vec![expected], "declared {declared:?}");
    }
}
