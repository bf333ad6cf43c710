//! `carmi logs` at the router: a read goes to the local RM running the
//! job's master and its answer back to the admin who asked; every way the
//! answer cannot come (unknown job, master not started, machine gone, no
//! answer in time) is a clear failure, and an ended job says so.

use std::time::Duration;

use carmi_proto::ids::{JobId, ProcessId};
use carmi_proto::msg::{
    ExecutableRef, ExitStatus, FromGlobal, LogChunk, Role, StdStream, SubmitRequest, ToGlobal,
};

use super::reports::logs::LOG_READ_TIMEOUT;
use super::{LinkId, Output, Router, RouterConfig};

const ADMIN: LinkId = LinkId(100);
const M0: LinkId = LinkId(1);
const M1: LinkId = LinkId(2);

fn exe() -> ExecutableRef {
    ExecutableRef {
        name: "master".into(),
        sha256: "cd".repeat(32),
        size: 10,
    }
}

fn sends(r: &mut Router, f: impl FnOnce(&mut Router)) -> Vec<(LinkId, FromGlobal)> {
    f(r);
    r.sanity_check();
    r.take_outputs()
        .into_iter()
        .filter_map(|o| match o {
            Output::Send { link, msg } => Some((link, msg)),
            _ => None,
        })
        .collect()
}

/// A router whose machines are never lost by silence (the tests move time).
fn router() -> Router {
    let config = RouterConfig {
        heartbeat: Duration::from_secs(3600),
        ..RouterConfig::default()
    };
    let mut r = Router::new(config);
    r.on_executable_stored(&exe());
    sends(&mut r, |r| {
        r.on_link_opened(ADMIN, Role::Admin, Duration::ZERO)
    });
    r
}

fn advertise(r: &mut Router, link: LinkId, name: &str) {
    sends(r, |r| {
        r.on_link_opened(link, Role::Local { name: name.into() }, Duration::ZERO)
    });
    let msg = ToGlobal::Advertise {
        ad: format!("[ Name = \"{name}\" ]"),
        slots: 1,
        running: vec![],
    };
    sends(r, |r| r.on_message(link, msg, Duration::ZERO));
}

/// Submits a job whose master runs on `machine`; its master process, if it started.
fn submit(r: &mut Router, machine: &str, count: &str) -> Option<ProcessId> {
    let file = format!("executable = master\nmachine_count = {count}\nqueue\n");
    let msg = ToGlobal::Submit(Box::new(SubmitRequest {
        owner: "alice".into(),
        machine: machine.into(),
        executable: exe(),
        spec: carmi_proto::submit::parse("job.sub", &file).unwrap(),
        submitted_unix: 0,
        anywhere: false,
        procs: Vec::new(),
        max_materialize: None,
        max_idle: None,
    }));
    sends(r, |r| r.on_message(ADMIN, msg, Duration::ZERO))
        .into_iter()
        .find_map(|(_, m)| match m {
            FromGlobal::SpawnMaster { process, .. } => Some(process),
            _ => None,
        })
}

fn logs(r: &mut Router, job: u64, at: Duration) -> Vec<(LinkId, FromGlobal)> {
    let msg = ToGlobal::Logs {
        job: JobId(job),
        stream: StdStream::Stderr,
        offset: 7,
    };
    sends(r, |r| r.on_message(ADMIN, msg, at))
}

/// The request number of the one `ReadLog` sent, to `link`.
fn read_sent(out: &[(LinkId, FromGlobal)], link: LinkId, master: ProcessId) -> u64 {
    match out {
        [
            (
                l,
                FromGlobal::ReadLog {
                    request,
                    process,
                    stream,
                    offset,
                },
            ),
        ] => {
            assert_eq!(
                (*l, *process, *stream, *offset),
                (link, master, StdStream::Stderr, 7)
            );
            *request
        }
        _ => panic!("one ReadLog expected: {out:?}"),
    }
}

/// The message of the one admin failure in `out`.
fn failure(out: &[(LinkId, FromGlobal)]) -> String {
    match out {
        [(ADMIN, FromGlobal::AdminFailed(f))] => f.message.clone(),
        _ => panic!("one admin failure expected: {out:?}"),
    }
}

fn chunk(text: &str) -> LogChunk {
    LogChunk {
        text: text.into(),
        next: 7 + text.len() as u64,
        size: 100,
    }
}

#[test]
fn a_read_goes_to_the_masters_machine_and_its_answer_to_the_admin() {
    let mut r = router();
    advertise(&mut r, M0, "m0");
    advertise(&mut r, M1, "m1");
    let master = submit(&mut r, "m1", "1..1").expect("the master starts");
    let out = logs(&mut r, 1, Duration::ZERO);
    let request = read_sent(&out, M1, master);
    // Another machine cannot answer for m1.
    let answer = ToGlobal::LogRead {
        request,
        result: Ok(chunk("hello\n")),
    };
    let out = sends(&mut r, |r| r.on_message(M0, answer.clone(), Duration::ZERO));
    assert!(out.is_empty(), "{out:?}");
    let out = sends(&mut r, |r| r.on_message(M1, answer.clone(), Duration::ZERO));
    assert_eq!(
        out,
        [(
            ADMIN,
            FromGlobal::Log {
                job: JobId(1),
                chunk: Some(chunk("hello\n"))
            }
        )]
    );
    // Answered once: a second answer is dropped.
    let out = sends(&mut r, |r| r.on_message(M1, answer, Duration::ZERO));
    assert!(out.is_empty(), "{out:?}");
    assert_eq!(r.reports.log_reads.len(), 0);
}

#[test]
fn the_local_rms_refusal_reaches_the_admin_naming_job_and_machine() {
    let mut r = router();
    advertise(&mut r, M0, "m0");
    let master = submit(&mut r, "m0", "1..1").unwrap();
    let request = read_sent(&logs(&mut r, 1, Duration::ZERO), M0, master);
    let answer = ToGlobal::LogRead {
        request,
        result: Err("the process has no such output file".into()),
    };
    let m = failure(&sends(&mut r, |r| r.on_message(M0, answer, Duration::ZERO)));
    assert!(
        m.contains("job 1") && m.contains("`m0`") && m.contains("no such output"),
        "{m}"
    );
}

#[test]
fn a_read_whose_machine_disconnects_or_is_lost_fails_at_once() {
    let mut r = router();
    advertise(&mut r, M0, "m0");
    let master = submit(&mut r, "m0", "1..1").unwrap();
    read_sent(&logs(&mut r, 1, Duration::ZERO), M0, master);
    let out = sends(&mut r, |r| r.on_link_closed(M0, Duration::ZERO));
    let m = failure(&out);
    assert!(
        m.contains("job 1") && m.contains("connection closed"),
        "{m}"
    );
    // While it is away, a read is refused rather than left waiting.
    let m = failure(&logs(&mut r, 1, Duration::ZERO));
    assert!(m.contains("`m0`") && m.contains("not connected"), "{m}");

    // Lost by silence while a read waits (default heartbeats here).
    let mut r = Router::new(RouterConfig::default());
    r.on_executable_stored(&exe());
    sends(&mut r, |r| {
        r.on_link_opened(ADMIN, Role::Admin, Duration::ZERO)
    });
    advertise(&mut r, M0, "m0");
    let master = submit(&mut r, "m0", "1..1").unwrap();
    read_sent(&logs(&mut r, 1, Duration::ZERO), M0, master);
    let lost_at = r.next_deadline().expect("a deadline");
    assert!(
        lost_at < LOG_READ_TIMEOUT,
        "the machine is lost before the read times out"
    );
    let out = sends(&mut r, |r| r.on_tick(lost_at));
    let failed: Vec<_> = out
        .iter()
        .filter(|(l, m)| *l == ADMIN && matches!(m, FromGlobal::AdminFailed(_)))
        .collect();
    assert_eq!(failed.len(), 1, "{out:?}");
}

#[test]
fn a_read_with_no_answer_in_time_fails_with_why() {
    let mut r = router();
    advertise(&mut r, M0, "m0");
    let master = submit(&mut r, "m0", "1..1").unwrap();
    read_sent(&logs(&mut r, 1, Duration::from_secs(1)), M0, master);
    let at = Duration::from_secs(1) + LOG_READ_TIMEOUT;
    assert_eq!(r.next_deadline(), Some(at), "the driver is woken for it");
    let out = sends(&mut r, |r| r.on_tick(at - Duration::from_millis(1)));
    assert!(out.is_empty(), "{out:?}");
    let m = failure(&sends(&mut r, |r| r.on_tick(at)));
    assert!(
        m.contains("job 1") && m.contains("no answer within 15 s"),
        "{m}"
    );
    assert_eq!(r.reports.log_reads.next_deadline(), None);
    // A late answer is dropped.
    let answer = ToGlobal::LogRead {
        request: 0,
        result: Ok(chunk("late")),
    };
    assert!(sends(&mut r, |r| r.on_message(M0, answer, at)).is_empty());
}

#[test]
fn a_read_for_a_closed_admin_connection_is_forgotten() {
    let mut r = router();
    advertise(&mut r, M0, "m0");
    let master = submit(&mut r, "m0", "1..1").unwrap();
    let request = read_sent(&logs(&mut r, 1, Duration::ZERO), M0, master);
    sends(&mut r, |r| r.on_link_closed(ADMIN, Duration::ZERO));
    assert_eq!(r.reports.log_reads.len(), 0);
    assert_eq!(r.reports.log_reads.next_deadline(), None);
    let answer = ToGlobal::LogRead {
        request,
        result: Ok(chunk("x")),
    };
    assert!(sends(&mut r, |r| r.on_message(M0, answer, Duration::ZERO)).is_empty());
}

#[test]
fn unknown_waiting_and_ended_jobs_are_answered_without_asking_a_machine() {
    let mut r = router();
    advertise(&mut r, M0, "m0");
    let m = failure(&logs(&mut r, 9, Duration::ZERO));
    assert!(
        m.contains("job 9 is not in the queue or the history"),
        "{m}"
    );
    // Two hosts wanted, one in the pool: the job waits, its master not started.
    assert_eq!(submit(&mut r, "m0", "2..2"), None);
    let m = failure(&logs(&mut r, 1, Duration::ZERO));
    assert!(m.contains("job 1's master has not started yet"), "{m}");
    // A job that ended: no read, the answer says so.
    let mut r = router();
    advertise(&mut r, M0, "m0");
    let master = submit(&mut r, "m0", "1..1").unwrap();
    let exited = ToGlobal::Exited {
        process: master,
        status: ExitStatus::Code(0),
        cpu_seconds: 0.0,
        usage: Default::default(),
    };
    sends(&mut r, |r| r.on_message(M0, exited, Duration::ZERO));
    assert_eq!(
        logs(&mut r, 1, Duration::ZERO),
        [(
            ADMIN,
            FromGlobal::Log {
                job: JobId(1),
                chunk: None
            }
        )]
    );
}
