//! Submitted jobs at the router: the master's life, the journal's records,
//! and recovery from them with the job's processes still running.

use std::time::Duration;

use carmi_api::ids::{ConnId, HostId, JobId, ProcessId, RequestId};
use carmi_api::msg::{
    ExecutableRef, FromGlobal, Request, Role, SpawnTarget, SubmitRequest, ToGlobal,
};

use super::{LinkId, Output, Router, RouterConfig};
use crate::journal::{self, Record};

const ADMIN: LinkId = LinkId(100);

fn exe(name: &str) -> ExecutableRef {
    ExecutableRef {
        name: name.into(),
        sha256: "cd".repeat(32),
        size: 10,
    }
}

/// Runs one input; returns the sends and the journal records, checking invariants.
fn step(r: &mut Router, f: impl FnOnce(&mut Router)) -> (Vec<(LinkId, FromGlobal)>, Vec<Record>) {
    f(r);
    r.sanity_check();
    let (mut sends, mut records) = (Vec::new(), Vec::new());
    for o in r.take_outputs() {
        match o {
            Output::Send { link, msg } => sends.push((link, msg)),
            Output::Journal(rec) => {
                // Through the journal's own encoding and back.
                let (back, damage) = journal::parse(journal::encode(&rec).as_bytes());
                assert_eq!((back, damage), (vec![rec.clone()], None));
                records.push(rec);
            }
            // Connections closed (a lost machine) are not what these tests look at.
            Output::Close { .. } => {}
        }
    }
    (sends, records)
}

fn advertise(
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
    let spec = carmi_api::submit::parse("j", "executable = master\nmachine_count = 2..2\nqueue\n")
        .unwrap();
    let submit = ToGlobal::Submit(Box::new(SubmitRequest {
        owner: "alice".into(),
        machine: "m0".into(),
        executable: exe("master"),
        spec,
        submitted_unix: 5,
    }));
    let (sends, records) = step(&mut r, |r| r.on_message(ADMIN, submit, Duration::ZERO));
    // The job is in the journal before the answer; the master goes to m0.
    assert!(
        matches!(records[0], Record::Submitted { job: JobId(1), .. }),
        "{records:?}"
    );
    assert!(
        matches!(records[1], Record::Started { job: JobId(1), .. }),
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
    step(&mut r, |r| r.on_message(m0, started, Duration::ZERO));
    // The master attaches and spawns a worker on one of its hosts.
    let attach = ToGlobal::AppAttach {
        conn: ConnId(9),
        job: Some(JobId(1)),
        process: Some(master),
        endpoint: "127.0.0.1:1".into(),
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
            assert!(
                records.is_empty(),
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
            status: carmi_api::msg::ExitStatus::Code(0),
            cpu_seconds: 0.0,
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
    let spec = carmi_api::submit::parse("j", "executable = master\nqueue\n").unwrap();
    let submit = ToGlobal::Submit(Box::new(SubmitRequest {
        owner: "bob".into(),
        machine: "m0".into(),
        executable: exe("master"),
        spec,
        submitted_unix: 0,
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
    // Silence: m0 is lost, and the job with its master.
    let later = Duration::from_secs(60);
    let (_, records) = step(&mut r, |r| r.on_tick(later));
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
    let spec = carmi_api::submit::parse("j", "executable = master\nqueue\n").unwrap();
    let submit = ToGlobal::Submit(Box::new(SubmitRequest {
        owner: "bob".into(),
        machine: "m0".into(),
        executable: exe("master"),
        spec,
        submitted_unix: 0,
    }));
    step(&mut r, |r| r.on_message(ADMIN, submit, Duration::ZERO));
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
        [Record::History(h), Record::Ended { job: JobId(1) }] => assert_eq!(
            h.end,
            carmi_api::msg::JobEnd::Completed(carmi_api::msg::ExitStatus::HostLost)
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
        let spec = carmi_api::submit::parse("j", "executable = master\nqueue\n").unwrap();
        ToGlobal::Submit(Box::new(SubmitRequest {
            owner: "carol".into(),
            machine: "m0".into(),
            executable: exe("master"),
            spec,
            submitted_unix: 0,
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
            status: carmi_api::msg::ExitStatus::Code(0),
            cpu_seconds: 0.0,
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

fn submit_msg(spec: carmi_api::submit::JobSpec) -> ToGlobal {
    ToGlobal::Submit(Box::new(SubmitRequest {
        owner: "carol".into(),
        machine: "m0".into(),
        executable: exe("master"),
        spec,
        submitted_unix: 7,
    }))
}

#[test]
fn a_submit_above_a_limit_is_refused_before_anything_is_built() {
    let mut r = Router::new(RouterConfig::default());
    advertise(&mut r, LinkId(1), "m0", vec![]);
    r.on_executable_stored(&exe("master"));
    step(&mut r, |r| {
        r.on_link_opened(ADMIN, Role::Admin, Duration::ZERO)
    });
    // A client that skips the parser's checks.
    let mut spec = carmi_api::submit::parse("j", "executable = master\nqueue\n").unwrap();
    spec.classes[0].min = u32::MAX;
    spec.classes[0].max = u32::MAX;
    let (sends, records) = step(&mut r, |r| {
        r.on_message(ADMIN, submit_msg(spec), Duration::ZERO)
    });
    assert!(records.is_empty(), "{records:?}");
    match &sends[..] {
        [(ADMIN, FromGlobal::AdminFailed(f))] => assert_eq!(
            f.message,
            "class `class0`: machine_count: 4294967295 is above the limit of 100000 machines per class"
        ),
        other => panic!("{other:?}"),
    }
    assert!(!r.allocator().has_job(JobId(1)));
    // Still serving.
    let (sends, _) = step(&mut r, |r| {
        r.on_message(ADMIN, ToGlobal::Status, Duration::ZERO)
    });
    assert!(
        matches!(sends[..], [(ADMIN, FromGlobal::Pool(_))]),
        "{sends:?}"
    );
}

#[test]
fn a_minimum_the_pool_cannot_supply_waits_flagged_in_the_queue() {
    let mut r = Router::new(RouterConfig::default());
    advertise(&mut r, LinkId(1), "m0", vec![]);
    r.on_executable_stored(&exe("master"));
    step(&mut r, |r| {
        r.on_link_opened(ADMIN, Role::Admin, Duration::ZERO)
    });
    let spec =
        carmi_api::submit::parse("j", "executable = master\nmachine_count = 100000\nqueue\n")
            .unwrap();
    let (sends, _) = step(&mut r, |r| {
        r.on_message(ADMIN, submit_msg(spec), Duration::ZERO)
    });
    assert_eq!(sends, [(ADMIN, FromGlobal::Submitted { job: JobId(1) })]);
    let (sends, _) = step(&mut r, |r| {
        r.on_message(ADMIN, ToGlobal::Queue, Duration::ZERO)
    });
    let [(ADMIN, FromGlobal::Queue(jobs))] = &sends[..] else {
        panic!("{sends:?}");
    };
    assert_eq!(jobs[0].state, "waiting");
    assert_eq!(
        jobs[0].note.as_deref(),
        Some("needs 100000 machines at once; the pool has 2 slots online")
    );
}

#[test]
fn a_master_that_cannot_start_ends_its_job_with_the_reason_in_the_history() {
    let mut r = Router::new(RouterConfig {
        started_unix: 1_000,
        ..RouterConfig::default()
    });
    let mut journal = Vec::new();
    let m0 = LinkId(1);
    journal.extend(advertise(&mut r, m0, "m0", vec![]).1);
    r.on_executable_stored(&exe("master"));
    step(&mut r, |r| {
        r.on_link_opened(ADMIN, Role::Admin, Duration::ZERO)
    });
    let spec = carmi_api::submit::parse("j", "executable = master\nqueue\n").unwrap();
    let (sends, records) = step(&mut r, |r| {
        r.on_message(ADMIN, submit_msg(spec), Duration::ZERO)
    });
    journal.extend(records);
    let Some(FromGlobal::SpawnMaster { process, .. }) = sends.get(1).map(|s| s.1.clone()) else {
        panic!("{sends:?}");
    };
    let reason = "cannot execute master: Exec format error (os error 8)";
    let started = ToGlobal::Started {
        process,
        result: Err(reason.into()),
    };
    let (_, records) = step(&mut r, |r| {
        r.on_message(m0, started, Duration::from_secs(5))
    });
    let want = carmi_api::msg::JobRecord {
        job: JobId(1),
        owner: "carol".into(),
        executable: "master".into(),
        submitted_unix: 7,
        ended_unix: 1_005,
        end: carmi_api::msg::JobEnd::FailedToStart(reason.into()),
    };
    assert_eq!(
        records,
        [
            Record::History(Box::new(want.clone())),
            Record::Ended { job: JobId(1) }
        ]
    );
    journal.extend(records);
    assert!(!r.allocator().has_job(JobId(1)));
    let history = |r: &mut Router, job| {
        let (sends, _) = step(r, |r| {
            r.on_message(ADMIN, ToGlobal::History { job }, Duration::from_secs(6))
        });
        match &sends[..] {
            [(ADMIN, FromGlobal::History(h))] => h.clone(),
            other => panic!("{other:?}"),
        }
    };
    assert_eq!(history(&mut r, None), std::slice::from_ref(&want));
    assert_eq!(history(&mut r, Some(JobId(1))), std::slice::from_ref(&want));
    assert!(history(&mut r, Some(JobId(2))).is_empty());
    // A restarted global RM has it too, from a compacted journal.
    let compacted = journal::Live::of(&journal).records();
    let mut again = Router::new(RouterConfig::default());
    again.recover(compacted);
    step(&mut again, |r| {
        r.on_link_opened(ADMIN, Role::Admin, Duration::ZERO)
    });
    assert_eq!(history(&mut again, None), [want]);
}

#[test]
fn the_history_keeps_the_last_jobs_only() {
    let mut h = super::jobs::History::default();
    for j in 0..super::HISTORY_LIMIT as u64 + 5 {
        h.push(carmi_api::msg::JobRecord {
            job: JobId(j),
            owner: String::new(),
            executable: String::new(),
            submitted_unix: 0,
            ended_unix: 0,
            end: carmi_api::msg::JobEnd::Removed,
        });
    }
    let all = h.select(None);
    assert_eq!(all.len(), super::HISTORY_LIMIT);
    assert_eq!(all[0].job, JobId(5));
    let live = journal::Live::of(
        &all.into_iter()
            .chain(std::iter::once(carmi_api::msg::JobRecord {
                job: JobId(99_999),
                owner: String::new(),
                executable: String::new(),
                submitted_unix: 0,
                ended_unix: 0,
                end: carmi_api::msg::JobEnd::Removed,
            }))
            .map(|r| Record::History(Box::new(r)))
            .collect::<Vec<_>>(),
    );
    assert_eq!(live.len(), 1 + super::HISTORY_LIMIT);
}

#[test]
fn an_attach_naming_ids_near_the_end_of_the_counters_gets_fresh_ones() {
    let mut r = Router::new(RouterConfig::default());
    let m0 = LinkId(1);
    advertise(&mut r, m0, "m0", vec![]);
    let attach = |conn, job: u64, process: u64| ToGlobal::AppAttach {
        conn: ConnId(conn),
        job: Some(JobId(job)),
        process: Some(ProcessId(process)),
        endpoint: "127.0.0.1:1".into(),
    };
    // Before the limit, this moved the job counter to u64::MAX + 1 (a
    // panic, or 0 in a release build: every later id taken).
    let (sends, _) = step(&mut r, |r| {
        r.on_message(m0, attach(1, u64::MAX, u64::MAX), Duration::ZERO)
    });
    let (job, process) = match &sends[..] {
        [(_, FromGlobal::Attached { job, process, .. })] => (*job, *process),
        other => panic!("{other:?}"),
    };
    assert_eq!((job, process), (JobId(1), ProcessId(1)));
    // Ids at the limit are still adopted (a job of an earlier run).
    let max = carmi_api::limits::MAX_ID;
    let (sends, _) = step(&mut r, |r| {
        r.on_message(m0, attach(2, max, max), Duration::ZERO)
    });
    assert!(
        matches!(&sends[..], [(_, FromGlobal::Attached { job, process, .. })] if job.0 == max && process.0 == max),
        "{sends:?}"
    );
}

#[test]
fn a_machine_name_above_the_limit_is_refused_with_the_limit() {
    let mut r = Router::new(RouterConfig::default());
    let name = "m".repeat(300);
    r.on_link_opened(LinkId(1), Role::Local { name }, Duration::ZERO);
    match &r.take_outputs()[..] {
        [Output::Close { link, reason }] => {
            assert_eq!(*link, LinkId(1));
            assert_eq!(
                reason,
                "machine name: 300 bytes is above the limit of 255 bytes"
            );
        }
        other => panic!("{other:?}"),
    }
    r.sanity_check();
}

#[test]
fn a_journaled_job_above_a_limit_is_dropped_on_replay() {
    let mut spec = carmi_api::submit::parse("j", "executable = master\nqueue\n").unwrap();
    spec.arguments = vec!["x".repeat(carmi_api::limits::MAX_ARG_BYTES + 1)];
    let request = Box::new(SubmitRequest {
        owner: "old".into(),
        machine: "m0".into(),
        executable: exe("master"),
        spec,
        submitted_unix: 0,
    });
    let mut r = Router::new(RouterConfig::default());
    r.recover(vec![Record::Submitted {
        job: JobId(4),
        request,
    }]);
    assert!(!r.allocator().has_job(JobId(4)));
    r.sanity_check();
}

#[test]
fn arguments_that_outgrow_the_limit_once_the_job_id_is_expanded_are_refused() {
    let mut r = Router::new(RouterConfig::default());
    // A long-lived pool: job ids of 16 digits.
    r.recover(vec![Record::Counters {
        next_job: 1_000_000_000_000_000,
        next_process: 1,
    }]);
    advertise(&mut r, LinkId(1), "m0", vec![]);
    r.on_executable_stored(&exe("master"));
    step(&mut r, |r| {
        r.on_link_opened(ADMIN, Role::Admin, Duration::ZERO)
    });
    // 130,000 bytes as written: within the limit; 208,000 once expanded.
    let text = format!(
        "executable = master\narguments = {}\nqueue\n",
        "$(Cluster)".repeat(13_000)
    );
    let spec = carmi_api::submit::parse("j", &text).unwrap();
    let (sends, records) = step(&mut r, |r| {
        r.on_message(ADMIN, submit_msg(spec), Duration::ZERO)
    });
    assert!(records.is_empty(), "{records:?}");
    match &sends[..] {
        [(ADMIN, FromGlobal::AdminFailed(f))] => assert_eq!(
            f.message,
            "arguments (argument 1): 208000 bytes is above the limit of 131071 bytes per argument (Linux's MAX_ARG_STRLEN), once $(Cluster) is expanded to 1000000000000000"
        ),
        other => panic!("{other:?}"),
    }
}

#[test]
fn a_forwarded_request_above_a_limit_is_failed_naming_it() {
    let mut r = Router::new(RouterConfig::default());
    let m0 = LinkId(1);
    advertise(&mut r, m0, "m0", vec![]);
    let attach = ToGlobal::AppAttach {
        conn: ConnId(3),
        job: None,
        process: None,
        endpoint: "127.0.0.1:1".into(),
    };
    step(&mut r, |r| r.on_message(m0, attach, Duration::ZERO));
    let forward = |id, body| ToGlobal::Forward {
        conn: ConnId(3),
        id: RequestId(id),
        body,
    };
    let define = Request::DefineClass {
        name: "w".into(),
        expression: "true".into(),
        rank: None,
    };
    step(&mut r, |r| {
        r.on_message(m0, forward(1, define), Duration::ZERO)
    });
    let add = Request::AddHosts {
        class: "w".into(),
        count: u32::MAX,
        increment: 1,
    };
    let (sends, _) = step(&mut r, |r| {
        r.on_message(m0, forward(2, add), Duration::ZERO)
    });
    match &sends[..] {
        [
            (
                _,
                FromGlobal::Deliver {
                    event: carmi_api::msg::Event::Failed { request, failure },
                    ..
                },
            ),
        ] => {
            assert_eq!(*request, RequestId(2));
            assert_eq!(
                failure.message,
                "AddHosts count: 4294967295 is above the limit of 100000 machines per class"
            );
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(r.allocator().pending_requests(), 0);
}
