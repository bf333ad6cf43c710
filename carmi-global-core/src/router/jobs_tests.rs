//! Submitted jobs at the router: the master's life, the journal's records,
//! and recovery from them with the job's processes still running.

use std::time::Duration;

use carmi_proto::ids::{ConnId, HostId, JobId, ProcessId, RequestId};
use carmi_proto::msg::{
    ExecutableRef, FromGlobal, Request, Role, SpawnTarget, SubmitRequest, ToGlobal,
};

use super::hand_tests::step;
use super::{LinkId, Output, Router, RouterConfig};
use crate::journal::{self, Record};

const ADMIN: LinkId = LinkId(100);

pub(super) fn exe(name: &str) -> ExecutableRef {
    ExecutableRef {
        name: name.into(),
        sha256: "cd".repeat(32),
        size: 10,
    }
}

pub(super) fn advertise(
    r: &mut Router,
    link: LinkId,
    name: &str,
    running: Vec<ProcessId>,
) -> (Vec<(LinkId, FromGlobal)>, Vec<Record>) {
    let (sends, _) = step(r, |r| {
        r.on_link_opened(link, Role::Local { name: name.into() }, Duration::ZERO)
    });
    assert!(sends.is_empty());
    let msg = ToGlobal::Advertise {
        ad: format!("[ Name = \"{name}\"; Arch = \"X86_64\" ]"),
        slots: 2,
        running,
    };
    step(r, |r| r.on_message(link, msg, Duration::ZERO))
}

#[test]
fn a_job_recovered_from_the_journal_keeps_its_running_processes() {
    let mut r = Router::new(RouterConfig::default());
    let mut journal = Vec::new();
    let (m0, m1) = (LinkId(1), LinkId(2));
    journal.extend(step(&mut r, |_| {}).1);
    journal.extend(advertise(&mut r, m0, "m0", vec![]).1);
    journal.extend(advertise(&mut r, m1, "m1", vec![]).1);
    r.on_executable_stored(&exe("master"));
    r.on_executable_stored(&exe("worker"));
    step(&mut r, |r| {
        r.on_link_opened(ADMIN, Role::Admin, Duration::ZERO)
    });
    let spec =
        carmi_proto::submit::parse("j", "executable = master\nmachine_count = 2..2\nqueue\n")
            .unwrap();
    let submit = ToGlobal::Submit(Box::new(SubmitRequest {
        owner: "alice".into(),
        machine: "m0".into(),
        executable: exe("master"),
        spec,
        submitted_unix: 5,
        anywhere: false,
        procs: Vec::new(),
        max_materialize: None,
        max_idle: None,
    }));
    let (sends, records) = step(&mut r, |r| r.on_message(ADMIN, submit, Duration::ZERO));
    // The job is in the journal before the answer; the master goes to m0.
    assert!(
        matches!(records[0], Record::Submitted { job: JobId(1), .. }),
        "{records:?}"
    );
    // Its two hosts are journaled before the master is sent.
    assert!(
        matches!(
            &records[1..3],
            [
                Record::Claimed { job: JobId(1), .. },
                Record::Claimed { job: JobId(1), .. }
            ]
        ),
        "{records:?}"
    );
    assert!(
        matches!(records[3], Record::Started { job: JobId(1), .. }),
        "{records:?}"
    );
    let master = match &sends[..] {
        [
            (l, FromGlobal::Submitted { job: JobId(1) }),
            (m, FromGlobal::SpawnMaster { process, .. }),
        ] if *l == ADMIN && *m == m0 => *process,
        other => panic!("{other:?}"),
    };
    journal.extend(records);
    let started = ToGlobal::Started {
        process: master,
        result: Ok(()),
    };
    journal.extend(step(&mut r, |r| r.on_message(m0, started, Duration::ZERO)).1);
    // The master attaches and spawns a worker on one of its hosts.
    let attach = ToGlobal::AppAttach {
        conn: ConnId(9),
        job: Some(JobId(1)),
        process: Some(master),
        endpoint: "127.0.0.1:1".into(),
        token: None,
    };
    step(&mut r, |r| r.on_message(m0, attach, Duration::ZERO));
    let spawn = ToGlobal::Forward {
        conn: ConnId(9),
        id: RequestId(1),
        body: Request::ClassSpawn {
            executable: exe("worker"),
            args: vec![],
            target: SpawnTarget::Class("class0".into()),
            output: Default::default(),
        },
    };
    let (sends, records) = step(&mut r, |r| r.on_message(m0, spawn, Duration::ZERO));
    let (worker, host) = match &records[..] {
        [
            Record::Spawned {
                process,
                host,
                class,
                ..
            },
        ] if class == "class0" => (*process, *host),
        other => panic!("{other:?} / {sends:?}"),
    };
    journal.extend(records);
    let before: Vec<HostId> = r.allocator().job_hosts(JobId(1));

    // A new global RM from the journal alone, as written and as compacted.
    let journal_machines: Vec<&Record> = journal
        .iter()
        .filter(|r| matches!(r, Record::Machine { .. }))
        .collect();
    assert_eq!(journal_machines.len(), 2, "{journal:?}");
    let compacted = journal::Live::of(&journal).records();
    for journal in [journal.clone(), compacted] {
        let mut r = Router::new(RouterConfig::default());
        r.recover(journal);
        let worker_link = if r.allocator().host_machine(host) == Some("m0") {
            m0
        } else {
            m1
        };
        let running = |l: LinkId| {
            let mut v = vec![];
            if l == worker_link {
                v.push(worker);
            }
            if l == m0 {
                v.push(master);
            }
            v
        };
        for (link, name) in [(m0, "m0"), (m1, "m1")] {
            let (sends, records) = advertise(&mut r, link, name, running(link));
            // The worker's `Started` never came before the restart: its
            // machine listing it running says it started (issue 15 item 4).
            assert!(
                records
                    .iter()
                    .all(|r| matches!(r, Record::Running { process } if *process == worker)),
                "same host ids, nothing new: {records:?}"
            );
            assert!(
                !sends
                    .iter()
                    .any(|(_, m)| matches!(m, FromGlobal::Kill { .. })),
                "nothing is killed: {sends:?}"
            );
        }
        assert_eq!(r.allocator().known_hosts("m0").len(), 2);
        assert!(
            r.allocator().job_hosts(JobId(1)).contains(&host),
            "the worker's host is the job's again"
        );
        assert_eq!(r.allocator().job_hosts(JobId(1)).len(), before.len());
        assert!(r.processes().find(worker).is_some_and(|p| p.is_live()));
        // The master's exit still ends the job.
        let exited = ToGlobal::Exited {
            process: master,
            status: carmi_proto::msg::ExitStatus::Code(0),
            cpu_seconds: 0.0,
            usage: Default::default(),
        };
        let (sends, records) = step(&mut r, |r| r.on_message(m0, exited, Duration::ZERO));
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
fn a_master_waits_for_its_machine_and_ends_with_it() {
    let mut r = Router::new(RouterConfig::default());
    let (m0, m1) = (LinkId(1), LinkId(2));
    advertise(&mut r, m0, "m0", vec![]);
    advertise(&mut r, m1, "m1", vec![]);
    r.on_executable_stored(&exe("master"));
    // m0's connection drops: it is not lost (yet), so a submit naming it is accepted.
    step(&mut r, |r| r.on_link_closed(m0, Duration::ZERO));
    step(&mut r, |r| {
        r.on_link_opened(ADMIN, Role::Admin, Duration::ZERO)
    });
    let spec = carmi_proto::submit::parse("j", "executable = master\nqueue\n").unwrap();
    let submit = ToGlobal::Submit(Box::new(SubmitRequest {
        owner: "bob".into(),
        machine: "m0".into(),
        executable: exe("master"),
        spec,
        submitted_unix: 0,
        anywhere: false,
        procs: Vec::new(),
        max_materialize: None,
        max_idle: None,
    }));
    let (sends, _) = step(&mut r, |r| r.on_message(ADMIN, submit, Duration::ZERO));
    assert_eq!(sends, [(ADMIN, FromGlobal::Submitted { job: JobId(1) })]);
    // `carmi q` says what it waits for.
    let (sends, _) = step(&mut r, |r| {
        r.on_message(ADMIN, ToGlobal::Queue, Duration::ZERO)
    });
    match &sends[..] {
        [(ADMIN, FromGlobal::Queue(jobs))] => assert_eq!(
            jobs[0].note.as_deref(),
            Some("the master waits for machine `m0` to connect")
        ),
        other => panic!("{other:?}"),
    }
    // Back: the master goes out right after the registration.
    let (sends, _) = advertise(&mut r, LinkId(3), "m0", vec![]);
    assert!(
        matches!(sends[0].1, FromGlobal::Registered { .. }),
        "{sends:?}"
    );
    let master = match &sends[1..] {
        [
            (
                LinkId(3),
                FromGlobal::SpawnMaster {
                    process,
                    job: JobId(1),
                    ..
                },
            ),
        ] => *process,
        other => panic!("{other:?}"),
    };
    // Silence: m0 is lost, and the job with its master (a tick that late
    // first counts its silence again: see `Router::on_tick`).
    let later = Duration::from_secs(60);
    step(&mut r, |r| r.on_tick(later));
    let (_, records) = step(&mut r, |r| r.on_tick(later + Duration::from_secs(3)));
    assert!(
        records.contains(&Record::Ended { job: JobId(1) }),
        "{records:?}"
    );
    assert!(!r.allocator().has_job(JobId(1)));
    assert!(r.processes().find(master).is_none());
}

#[test]
fn a_master_missing_from_its_machines_advertisement_ends_its_job() {
    let mut r = Router::new(RouterConfig::default());
    let m0 = LinkId(1);
    advertise(&mut r, m0, "m0", vec![]);
    r.on_executable_stored(&exe("master"));
    step(&mut r, |r| {
        r.on_link_opened(ADMIN, Role::Admin, Duration::ZERO)
    });
    let spec = carmi_proto::submit::parse("j", "executable = master\nqueue\n").unwrap();
    let submit = ToGlobal::Submit(Box::new(SubmitRequest {
        owner: "bob".into(),
        machine: "m0".into(),
        executable: exe("master"),
        spec,
        submitted_unix: 0,
        anywhere: false,
        procs: Vec::new(),
        max_materialize: None,
        max_idle: None,
    }));
    let (sends, _) = step(&mut r, |r| r.on_message(ADMIN, submit, Duration::ZERO));
    let Some((_, FromGlobal::SpawnMaster { process, .. })) = sends.last() else {
        panic!("{sends:?}");
    };
    // It runs (a master never reported started is sent again instead:
    // `master_restart_tests`).
    let started = ToGlobal::Started {
        process: *process,
        result: Ok(()),
    };
    step(&mut r, |r| r.on_message(m0, started, Duration::ZERO));
    // The local RM restarts and no longer runs it: at its next heartbeat the job ends.
    step(&mut r, |r| r.on_link_closed(m0, Duration::ZERO));
    advertise(&mut r, LinkId(2), "m0", vec![]);
    assert!(
        r.allocator().has_job(JobId(1)),
        "not before the backlog is in"
    );
    let hb = ToGlobal::Heartbeat {
        update: String::new(),
    };
    let (_, records) = step(&mut r, |r| r.on_message(LinkId(2), hb, Duration::ZERO));
    match &records[..] {
        // Then the job's `ended` event (router::events).
        [
            Record::History(h),
            Record::Ended { job: JobId(1) },
            Record::Events(_),
        ] => assert_eq!(
            h.end,
            carmi_proto::msg::JobEnd::Completed(carmi_proto::msg::ExitStatus::HostLost)
        ),
        other => panic!("{other:?}"),
    }
    assert!(!r.allocator().has_job(JobId(1)));
}

#[test]
fn ids_never_go_back_after_a_compacted_journal_is_replayed() {
    let mut r = Router::new(RouterConfig::default());
    let mut journal = Vec::new();
    journal.extend(advertise(&mut r, LinkId(1), "m0", vec![]).1);
    r.on_executable_stored(&exe("master"));
    step(&mut r, |r| {
        r.on_link_opened(ADMIN, Role::Admin, Duration::ZERO)
    });
    let submit = || {
        let spec = carmi_proto::submit::parse("j", "executable = master\nqueue\n").unwrap();
        ToGlobal::Submit(Box::new(SubmitRequest {
            owner: "carol".into(),
            machine: "m0".into(),
            executable: exe("master"),
            spec,
            submitted_unix: 0,
            anywhere: false,
            procs: Vec::new(),
            max_materialize: None,
            max_idle: None,
        }))
    };
    let mut masters = Vec::new();
    for _ in 0..2 {
        let (sends, records) = step(&mut r, |r| r.on_message(ADMIN, submit(), Duration::ZERO));
        journal.extend(records);
        masters.extend(sends.iter().filter_map(|(_, m)| match m {
            FromGlobal::SpawnMaster { process, .. } => Some(*process),
            _ => None,
        }));
    }
    assert_eq!(masters.len(), 2, "both masters go out");
    // Both end: the compacted journal holds no job at all.
    for &p in &masters {
        let exited = ToGlobal::Exited {
            process: p,
            status: carmi_proto::msg::ExitStatus::Code(0),
            cpu_seconds: 0.0,
            usage: Default::default(),
        };
        journal.extend(step(&mut r, |r| r.on_message(LinkId(1), exited, Duration::ZERO)).1);
    }
    let compacted = journal::Live::of(&journal).records();
    assert!(
        !compacted
            .iter()
            .any(|r| matches!(r, Record::Submitted { .. })),
        "{compacted:?}"
    );
    assert!(compacted.len() < journal.len());
    // A new global RM from it numbers the next job 3 and its master above both.
    let mut r = Router::new(RouterConfig::default());
    r.recover(compacted);
    advertise(&mut r, LinkId(1), "m0", vec![]);
    r.on_executable_stored(&exe("master"));
    step(&mut r, |r| {
        r.on_link_opened(ADMIN, Role::Admin, Duration::ZERO)
    });
    let (sends, _) = step(&mut r, |r| r.on_message(ADMIN, submit(), Duration::ZERO));
    assert!(
        sends.contains(&(ADMIN, FromGlobal::Submitted { job: JobId(3) })),
        "{sends:?}"
    );
    let master = sends.iter().find_map(|(_, m)| match m {
        FromGlobal::SpawnMaster { process, .. } => Some(*process),
        _ => None,
    });
    assert!(
        master.is_some_and(|p| masters.iter().all(|&old| p > old)),
        "{master:?} vs {masters:?}"
    );
}

#[path = "door_tests.rs"]
mod door;
#[path = "limits_tests.rs"]
mod limits;
#[path = "shrink_tests.rs"]
mod shrink;
