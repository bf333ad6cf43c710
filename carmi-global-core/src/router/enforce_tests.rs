//! A job's requests enforced, at the router: they go out with the master's
//! and the workers' spawns, a process over its `request_memory` holds its
//! job with both numbers in the reason (and a restart keeps it held), and
//! the peaks of exited processes reach `carmi q` and the history.

use std::time::Duration;

use carmi_proto::ids::{ConnId, JobId, ProcessId, RequestId};
use carmi_proto::msg::{
    ExecutableRef, ExitStatus, FromGlobal, JobEnd, ProcessUsage, Request, Requests, Role,
    SpawnTarget, SubmitRequest, ToGlobal,
};

use super::hand_tests::step;
use super::{LinkId, Router, RouterConfig};
use crate::journal::Record;

const ADMIN: LinkId = LinkId(100);
const M0: LinkId = LinkId(1);
const T: Duration = Duration::ZERO;
const ASKED: Requests = Requests {
    memory_mib: Some(100),
    cpus: Some(2),
};

fn exe(name: &str) -> ExecutableRef {
    ExecutableRef {
        name: name.into(),
        sha256: "ab".repeat(32),
        size: 10,
    }
}

fn msg(r: &mut Router, link: LinkId, m: ToGlobal) -> (Vec<(LinkId, FromGlobal)>, Vec<Record>) {
    step(r, |r| r.on_message(link, m, T))
}

/// A router with a big machine m0 (two slots), the job submitted with its
/// requests and its master running and attached; the journal, the master
/// and the worker it spawned.
fn running_job() -> (Router, Vec<Record>, ProcessId, ProcessId) {
    let mut r = Router::new(RouterConfig::default());
    let mut journal = Vec::new();
    step(&mut r, |r| {
        r.on_link_opened(M0, Role::Local { name: "m0".into() }, T)
    });
    let ad = ToGlobal::Advertise {
        ad: "[ Name = \"m0\"; Memory = 8000; Cpus = 4 ]".into(),
        slots: 2,
        running: vec![],
    };
    journal.extend(msg(&mut r, M0, ad).1);
    r.on_executable_stored(&exe("master"));
    r.on_executable_stored(&exe("worker"));
    step(&mut r, |r| r.on_link_opened(ADMIN, Role::Admin, T));
    let text = "executable = master\nrequest_memory = 100\nrequest_cpus = 2\nqueue\n";
    let req = ToGlobal::Submit(Box::new(SubmitRequest {
        owner: "alice".into(),
        machine: "m0".into(),
        executable: exe("master"),
        spec: carmi_proto::submit::parse("j", text).unwrap(),
        submitted_unix: 5,
        anywhere: false,
        procs: Vec::new(),
        max_materialize: None,
        max_idle: None,
    }));
    let (sends, records) = msg(&mut r, ADMIN, req);
    journal.extend(records);
    let master = sends
        .iter()
        .find_map(|(_, m)| match m {
            FromGlobal::SpawnMaster {
                process, requests, ..
            } => {
                assert_eq!(*requests, ASKED, "the master is bound like its workers");
                Some(*process)
            }
            _ => None,
        })
        .expect("the job starts at once");
    let started = ToGlobal::Started {
        process: master,
        result: Ok(()),
    };
    journal.extend(msg(&mut r, M0, started).1);
    let attach = ToGlobal::AppAttach {
        conn: ConnId(9),
        job: Some(JobId(1)),
        process: Some(master),
        endpoint: "127.0.0.1:1".into(),
        token: None,
    };
    msg(&mut r, M0, attach);
    let host = r.allocator().job_hosts(JobId(1))[0];
    let spawn = ToGlobal::Forward {
        conn: ConnId(9),
        id: RequestId(1),
        body: Request::ClassSpawn {
            executable: exe("worker"),
            args: vec![],
            target: SpawnTarget::Host(host),
            output: Default::default(),
        },
    };
    let (sends, records) = msg(&mut r, M0, spawn);
    journal.extend(records);
    let worker = sends
        .iter()
        .find_map(|(_, m)| match m {
            FromGlobal::Spawn {
                process, requests, ..
            } => {
                assert_eq!(*requests, ASKED, "a worker is bound to the job's requests");
                Some(*process)
            }
            _ => None,
        })
        .expect("the worker is spawned");
    (r, journal, master, worker)
}

fn exited(process: ProcessId, status: ExitStatus, usage: ProcessUsage) -> ToGlobal {
    ToGlobal::Exited {
        process,
        status,
        cpu_seconds: 0.5,
        usage,
    }
}

fn queued(r: &mut Router) -> carmi_proto::msg::JobStatus {
    match &msg(r, ADMIN, ToGlobal::Queue).0[..] {
        [(_, FromGlobal::Queue(q))] => q[0].clone(),
        other => panic!("{other:?}"),
    }
}

#[test]
fn a_worker_over_its_request_memory_holds_the_job_with_both_numbers() {
    let (mut r, mut journal, master, worker) = running_job();
    let over = ProcessUsage {
        memory_peak_kib: 100 * 1024 + 1,
        memory_exceeded_mib: Some(100),
    };
    let (sends, records) = msg(&mut r, M0, exited(worker, ExitStatus::Signal(9), over));
    journal.extend(records.clone());
    let reason = records
        .iter()
        .find_map(|rec| match rec {
            Record::Held {
                job: JobId(1),
                reason,
            } => Some(reason.clone()),
            _ => None,
        })
        .unwrap_or_else(|| panic!("the job is held: {records:?}"));
    assert!(
        reason.starts_with("memory usage 101 MiB exceeded request_memory 100 MiB"),
        "{reason}"
    );
    assert!(
        sends.contains(&(M0, FromGlobal::Kill { process: master })),
        "the rest of the job is stopped: {sends:?}"
    );
    let q = queued(&mut r);
    assert_eq!(
        (q.state.as_str(), q.note.as_deref()),
        ("held", Some(reason.as_str()))
    );
    let attr = |name: &str| {
        q.attrs
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.clone())
    };
    assert_eq!(attr("MemoryUsage").as_deref(), Some("101"));
    assert_eq!(attr("ResidentSetSize").as_deref(), Some("102401"));
    r.sanity_check();

    // A restart keeps it held, for the same reason.
    let mut back = Router::new(RouterConfig::default());
    back.recover(journal);
    back.sanity_check();
    assert!(back.allocator().is_held(JobId(1)));
}

#[test]
fn a_master_over_its_request_memory_holds_the_job_rather_than_ending_it() {
    let (mut r, _, master, worker) = running_job();
    let over = ProcessUsage {
        memory_peak_kib: 100 * 1024,
        memory_exceeded_mib: Some(100),
    };
    let (sends, records) = msg(&mut r, M0, exited(master, ExitStatus::Signal(9), over));
    assert!(
        records.iter().any(|rec| matches!(rec, Record::Held { .. })),
        "{records:?}"
    );
    assert!(
        !records.iter().any(|rec| matches!(rec, Record::History(_))),
        "held, not ended: {records:?}"
    );
    // The master is gone already: only the worker is killed.
    let kills: Vec<&FromGlobal> = sends
        .iter()
        .filter(|(_, m)| matches!(m, FromGlobal::Kill { .. }))
        .map(|(_, m)| m)
        .collect();
    assert_eq!(kills, [&FromGlobal::Kill { process: worker }]);
    assert!(
        queued(&mut r)
            .note
            .unwrap_or_default()
            .contains("memory usage 100 MiB")
    );
    r.sanity_check();
}

#[test]
fn within_its_requests_a_job_completes_with_its_highest_peak_in_the_history() {
    let (mut r, _, master, worker) = running_job();
    let peak = |kib| ProcessUsage {
        memory_peak_kib: kib,
        memory_exceeded_mib: None,
    };
    msg(
        &mut r,
        M0,
        exited(worker, ExitStatus::Code(0), peak(50_000)),
    );
    assert_eq!(queued(&mut r).state, "running");
    let (_, records) = msg(
        &mut r,
        M0,
        exited(master, ExitStatus::Code(0), peak(20_000)),
    );
    let record = records
        .iter()
        .find_map(|rec| match rec {
            Record::History(h) => Some(h.clone()),
            _ => None,
        })
        .unwrap_or_else(|| panic!("the job ended: {records:?}"));
    assert_eq!(record.end, JobEnd::Completed(ExitStatus::Code(0)));
    assert_eq!(record.usage.memory_peak_kib, 50_000);
    assert!(r.jobs.memory_peaks.is_empty(), "forgotten with the job");
    r.sanity_check();
}
