//! Jobs put back in the queue at the router: masters placed only where the
//! owner policy lets them start, a start the machine refused retried
//! elsewhere, a job whose executable does not run held after
//! `max_start_failures`, and a master vacated by its owner requeued.

use std::time::Duration;

use carmi_proto::ids::{JobId, ProcessId};
use carmi_proto::msg::{ExecutableRef, ExitStatus, FromGlobal, Role, SubmitRequest, ToGlobal};

use super::{LinkId, Output, Router, RouterConfig};
use crate::alloc::Phase;
use crate::journal::Record;

const ADMIN: LinkId = LinkId(100);
const OWNER: &str = "State = \"Owner\"\nActivity = \"Idle\"\nStart = false\n";
const LENDS: &str = "State = \"Unclaimed\"\nActivity = \"Idle\"\nStart = true\n";

fn exe() -> ExecutableRef {
    ExecutableRef {
        name: "master".into(),
        sha256: "cd".repeat(32),
        size: 10,
    }
}

fn step(r: &mut Router, at: u64, f: impl FnOnce(&mut Router, Duration)) -> Vec<Output> {
    f(r, Duration::from_secs(at));
    r.sanity_check();
    r.take_outputs()
}

/// The processes `SpawnMaster` went out for, with their link.
fn masters(out: &[Output]) -> Vec<(LinkId, ProcessId)> {
    out.iter()
        .filter_map(|o| match o {
            Output::Send {
                link,
                msg: FromGlobal::SpawnMaster { process, .. },
            } => Some((*link, *process)),
            _ => None,
        })
        .collect()
}

fn advertise(r: &mut Router, link: LinkId, name: &str, policy: &str) -> Vec<Output> {
    step(r, 0, |r, now| {
        r.on_link_opened(link, Role::Local { name: name.into() }, now)
    });
    let msg = ToGlobal::Advertise {
        ad: format!("[ Name = \"{name}\"; {} ]", policy.replace('\n', "; ")),
        slots: 4,
        running: vec![],
    };
    step(r, 0, |r, now| r.on_message(link, msg, now))
}

fn submit(r: &mut Router, file: &str) -> Vec<Output> {
    let spec = carmi_proto::submit::parse("job.sub", file).unwrap();
    let msg = ToGlobal::Submit(Box::new(SubmitRequest {
        owner: "alice".into(),
        machine: "laptop".into(),
        executable: exe(),
        spec,
        submitted_unix: 0,
        anywhere: true,
        procs: Vec::new(),
        max_materialize: None,
        max_idle: None,
    }));
    step(r, 0, |r, now| r.on_message(ADMIN, msg, now))
}

fn router() -> Router {
    // Machines that need no heartbeat within a test.
    let config = RouterConfig {
        heartbeat: Duration::from_secs(3600),
        ..RouterConfig::default()
    };
    let mut r = Router::new(config);
    r.on_executable_stored(&exe());
    step(&mut r, 0, |r, now| {
        r.on_link_opened(ADMIN, Role::Admin, now)
    });
    r
}

fn started(
    r: &mut Router,
    at: u64,
    link: LinkId,
    p: ProcessId,
    result: Result<(), String>,
) -> Vec<Output> {
    let msg = ToGlobal::Started { process: p, result };
    step(r, at, |r, now| r.on_message(link, msg, now))
}

const JOB: &str = "executable = master\nqueue\n";

#[test]
fn masters_go_only_where_the_owner_lets_them_start() {
    let mut r = router();
    let (busy, idle) = (LinkId(1), LinkId(2));
    // `busy` sorts first and runs no master: before, it got all four.
    advertise(&mut r, busy, "a-busy", OWNER);
    advertise(&mut r, idle, "b-idle", LENDS);
    let mut links = Vec::new();
    for _ in 0..4 {
        links.extend(masters(&submit(&mut r, JOB)).into_iter().map(|(l, _)| l));
    }
    assert_eq!(links, [idle; 4]);
}

#[test]
fn a_master_waits_for_an_owner_to_leave_and_then_starts_there() {
    let mut r = router();
    let busy = LinkId(1);
    advertise(&mut r, busy, "a-busy", OWNER);
    assert!(masters(&submit(&mut r, JOB)).is_empty());
    let q = r.queue_status();
    assert!(
        q[0].note
            .as_deref()
            .is_some_and(|n| n.contains("owner policy")),
        "{q:?}"
    );
    let update = ToGlobal::Heartbeat {
        update: LENDS.into(),
    };
    let out = step(&mut r, 1, |r, now| r.on_message(busy, update, now));
    assert_eq!(masters(&out).len(), 1, "{out:?}");
}

#[test]
fn a_start_the_machine_refused_puts_the_job_back_and_it_starts_elsewhere() {
    let mut r = router();
    let (a, b) = (LinkId(1), LinkId(2));
    advertise(&mut r, a, "a", LENDS);
    advertise(&mut r, b, "b", LENDS);
    let sent = masters(&submit(&mut r, JOB));
    assert_eq!(sent.len(), 1);
    let (first, p) = sent[0];
    let refusal = "the machine's owner policy does not let new processes start now".to_string();
    let out = started(&mut r, 1, first, p, Err(refusal));
    // Back in the queue (journaled as a hold and a release), never ended.
    let records: Vec<&Record> = out
        .iter()
        .filter_map(|o| match o {
            Output::Journal(rec) => Some(rec),
            _ => None,
        })
        .collect();
    assert!(
        records.iter().any(|r| matches!(r, Record::Released { .. })),
        "{records:?}"
    );
    assert!(
        !records.iter().any(|r| matches!(r, Record::History(_))),
        "{records:?}"
    );
    // The new master goes to the other machine.
    let again = masters(&out);
    assert_eq!(again.len(), 1, "{out:?}");
    assert_ne!(again[0].0, first);
    assert_ne!(again[0].1, p);
    let out = started(&mut r, 2, again[0].0, again[0].1, Ok(()));
    assert!(masters(&out).is_empty());
    assert!(matches!(
        r.allocator().job_phase(JobId(1)),
        Some(Phase::Running { .. })
    ));
}

#[test]
fn a_machine_that_refused_is_asked_again_only_after_a_while() {
    let mut r = router();
    let a = LinkId(1);
    advertise(&mut r, a, "a", LENDS);
    let (_, p) = masters(&submit(&mut r, JOB))[0];
    let out = started(
        &mut r,
        1,
        a,
        p,
        Err("no slot user is free for job j1".into()),
    );
    assert!(masters(&out).is_empty(), "asked again at once: {out:?}");
    let wake = r
        .next_deadline()
        .expect("a deadline for the machine passed over");
    assert!(
        wake <= Duration::from_secs(1) + super::jobs::requeue::AVOID_FOR,
        "{wake:?}"
    );
    let out = step(&mut r, wake.as_secs() + 1, |r, now| r.on_tick(now));
    assert_eq!(masters(&out).len(), 1, "{out:?}");
}

#[test]
fn an_executable_that_does_not_run_holds_the_job_after_max_start_failures() {
    let mut r = router();
    let a = LinkId(1);
    advertise(&mut r, a, "a", LENDS);
    let mut sent = masters(&submit(&mut r, JOB));
    for at in 1..=3 {
        assert_eq!(sent.len(), 1, "start {at}");
        let err = carmi_proto::msg::exec_failure("master", &"Exec format error");
        let out = started(&mut r, at, a, sent[0].1, Err(err));
        sent = masters(&out);
    }
    assert!(sent.is_empty());
    assert_eq!(r.allocator().job_phase(JobId(1)), Some(Phase::Held));
    let q = r.queue_status();
    let note = q[0].note.clone().unwrap_or_default();
    assert!(note.contains("failed to start 3 times"), "{note}");
    assert!(note.contains("Exec format error"), "{note}");
}

#[test]
fn a_master_vacated_by_its_owner_is_requeued_not_completed() {
    let mut r = router();
    let (a, b) = (LinkId(1), LinkId(2));
    advertise(&mut r, a, "a", LENDS);
    advertise(&mut r, b, "b", OWNER);
    let (link, p) = masters(&submit(&mut r, JOB))[0];
    started(&mut r, 1, link, p, Ok(()));
    // The owner of `a` comes back and stays: `b`'s owner left.
    let back = ToGlobal::Heartbeat {
        update: "State = \"Preempting\"\nActivity = \"Vacating\"\nStart = false\n".into(),
    };
    step(&mut r, 2, |r, now| r.on_message(a, back, now));
    let gone = ToGlobal::Heartbeat {
        update: LENDS.into(),
    };
    step(&mut r, 2, |r, now| r.on_message(b, gone, now));
    step(&mut r, 3, |r, now| {
        r.on_message(link, ToGlobal::Vacating { process: p }, now)
    });
    let exited = ToGlobal::Exited {
        process: p,
        status: ExitStatus::Signal(15),
        cpu_seconds: 0.5,
        usage: Default::default(),
    };
    let out = step(&mut r, 4, |r, now| r.on_message(link, exited, now));
    let again = masters(&out);
    assert_eq!(again.len(), 1, "{out:?}");
    assert_eq!(again[0].0, b);
    // It completes there; its history shows both starts and the eviction.
    started(&mut r, 5, b, again[0].1, Ok(()));
    let done = ToGlobal::Exited {
        process: again[0].1,
        status: ExitStatus::Code(0),
        cpu_seconds: 0.5,
        usage: Default::default(),
    };
    step(&mut r, 6, |r, now| r.on_message(b, done, now));
    let history = r.reports.history.select(Some(JobId(1)));
    assert_eq!(history.len(), 1);
    assert_eq!(
        history[0].end,
        carmi_proto::msg::JobEnd::Completed(ExitStatus::Code(0))
    );
    assert_eq!(
        (history[0].usage.starts, history[0].usage.evictions),
        (2, 1)
    );
}

#[test]
fn a_checkpoint_goes_to_the_next_master_and_survives_a_restart() {
    use carmi_proto::msg::ReturnedFile;
    let mut r = router();
    let (a, b) = (LinkId(1), LinkId(2));
    advertise(&mut r, a, "a", LENDS);
    advertise(&mut r, b, "b", OWNER);
    let file = "executable = master\ncheckpoint_exit_code = 85\ntransfer_checkpoint_files = counter\nqueue\n";
    let mut journal: Vec<Record> = Vec::new();
    let keep = |out: &[Output], journal: &mut Vec<Record>| {
        journal.extend(out.iter().filter_map(|o| match o {
            Output::Journal(rec) => Some(rec.clone()),
            _ => None,
        }))
    };
    let out = submit(&mut r, file);
    keep(&out, &mut journal);
    let (link, p) = masters(&out)[0];
    keep(&started(&mut r, 1, link, p, Ok(())), &mut journal);
    let counter = ReturnedFile {
        name: "counter".into(),
        size: 2,
        truncated: false,
        dest: String::new(),
    };
    let back = ToGlobal::MasterFiles {
        process: p,
        files: vec![counter],
    };
    step(&mut r, 2, |r, now| r.on_message(link, back, now));
    let exited = ToGlobal::Exited {
        process: p,
        status: ExitStatus::Code(85),
        cpu_seconds: 0.1,
        usage: Default::default(),
    };
    let out = step(&mut r, 3, |r, now| r.on_message(link, exited, now));
    keep(&out, &mut journal);
    // Saved before the job goes back: no master until then.
    let save = out.iter().find_map(|o| match o {
        Output::SaveCheckpoint { job, files, names } => Some((*job, files.clone(), names.clone())),
        _ => None,
    });
    let (job, files, names) = save.expect("the checkpoint is saved");
    assert_eq!((job, names), (JobId(1), vec!["counter".to_string()]));
    assert_eq!((files.process, files.files.len()), (p, 1));
    assert!(masters(&out).is_empty());
    let stored = ExecutableRef {
        name: "counter".into(),
        sha256: "ab".repeat(32),
        size: 2,
    };
    let out = step(&mut r, 4, |r, _| {
        r.on_checkpoint_saved(JobId(1), Ok(vec![stored.clone()]))
    });
    keep(&out, &mut journal);
    let inputs = |out: &[Output]| {
        out.iter().find_map(|o| match o {
            Output::Send {
                msg: FromGlobal::SpawnMaster { inputs, .. },
                ..
            } => Some(inputs.clone()),
            _ => None,
        })
    };
    assert_eq!(inputs(&out), Some(vec![stored.clone()]), "{out:?}");
    // A restarted global RM starts its next master from it too.
    let mut again = router();
    again.recover(crate::journal::Live::of(&journal).records());
    let q = again.queue_status();
    assert_eq!(q.len(), 1);
    let r2 = again
        .jobs
        .submitted
        .get(&JobId(1))
        .and_then(|s| s.tries.checkpoint.clone());
    assert_eq!(r2.map(|c| c.files), Some(vec![stored]));
}
