//! Applications whose job ended are told, never left waiting (issue 15,
//! "nothing stuck"): the master of a job that its machine's loss ended,
//! announced again when the machine comes back at once, hears why its job
//! ended instead of being quietly attached to a new job; a job removed
//! while its master is attached tells the master too.

use std::time::Duration;

use carmi_proto::ids::{ConnId, JobId, ProcessId, RequestId};
use carmi_proto::msg::{ExecutableRef, FromGlobal, Request, Role, SubmitRequest, ToGlobal};

use super::hand_tests::step;
use super::{LinkId, Router, RouterConfig};

const ADMIN: LinkId = LinkId(100);
const CONN: ConnId = ConnId(9);

fn exe() -> ExecutableRef {
    ExecutableRef {
        name: "master".into(),
        sha256: "cd".repeat(32),
        size: 10,
    }
}

fn open(
    r: &mut Router,
    link: LinkId,
    name: &str,
    running: Vec<ProcessId>,
    at: Duration,
) -> Vec<(LinkId, FromGlobal)> {
    step(r, |r| {
        r.on_link_opened(link, Role::Local { name: name.into() }, at)
    });
    let msg = ToGlobal::Advertise {
        ad: format!("[ Name = \"{name}\"; Arch = \"X86_64\" ]"),
        slots: 1,
        running,
    };
    step(r, |r| r.on_message(link, msg, at)).0
}

/// Two machines, a job submitted with its master on m0 (link 1), running
/// and attached on `CONN` with an `AddHosts` no machine can serve pending.
fn running_job() -> (Router, ProcessId) {
    let mut r = Router::new(RouterConfig::default());
    open(&mut r, LinkId(1), "m0", vec![], Duration::ZERO);
    open(&mut r, LinkId(2), "m1", vec![], Duration::ZERO);
    r.on_executable_stored(&exe());
    step(&mut r, |r| {
        r.on_link_opened(ADMIN, Role::Admin, Duration::ZERO)
    });
    let spec =
        carmi_proto::submit::parse("j", "executable = master\nmachine_count = 1\nqueue\n").unwrap();
    let submit = ToGlobal::Submit(Box::new(SubmitRequest {
        owner: "alice".into(),
        machine: "m0".into(),
        executable: exe(),
        spec,
        submitted_unix: 5,
        anywhere: false,
        procs: Vec::new(),
        max_materialize: None,
        max_idle: None,
    }));
    let (sends, _) = step(&mut r, |r| r.on_message(ADMIN, submit, Duration::ZERO));
    let master = sends
        .iter()
        .find_map(|(_, m)| match m {
            FromGlobal::SpawnMaster { process, .. } => Some(*process),
            _ => None,
        })
        .expect("the master is sent");
    let started = ToGlobal::Started {
        process: master,
        result: Ok(()),
    };
    step(&mut r, |r| r.on_message(LinkId(1), started, Duration::ZERO));
    let (sends, _) = step(&mut r, |r| {
        r.on_message(LinkId(1), attach(master), Duration::ZERO)
    });
    assert!(
        sends.iter().any(|(_, m)| matches!(
            m,
            FromGlobal::Attached {
                conn: CONN,
                job: JobId(1),
                ..
            }
        )),
        "{sends:?}"
    );
    let define = Request::DefineClass {
        name: "big".into(),
        expression: "Memory > 1000000".into(),
        rank: None,
        replace: false,
    };
    let add = Request::AddHosts {
        class: "big".into(),
        count: 1,
        increment: 1,
    };
    for (id, body) in [(1, define), (2, add)] {
        let msg = ToGlobal::Forward {
            conn: CONN,
            id: RequestId(id),
            body,
        };
        step(&mut r, |r| r.on_message(LinkId(1), msg, Duration::ZERO));
    }
    (r, master)
}

fn attach(master: ProcessId) -> ToGlobal {
    ToGlobal::AppAttach {
        conn: CONN,
        job: Some(JobId(1)),
        process: Some(master),
        endpoint: "127.0.0.1:1".into(),
        token: None,
    }
}

fn gone_reason(sends: &[(LinkId, FromGlobal)], link: LinkId) -> Option<String> {
    sends.iter().find_map(|(l, m)| match m {
        FromGlobal::JobGone {
            conn: CONN,
            job: JobId(1),
            reason,
        } if *l == link => Some(reason.clone()),
        _ => None,
    })
}

#[test]
fn a_master_announced_again_after_its_machine_was_lost_hears_its_job_ended() {
    let (mut r, master) = running_job();
    // Both machines fall silent past the bound (3 s); m0 is lost, and so its job.
    let at = Duration::from_millis(3001);
    step(&mut r, |r| r.on_tick(at));
    assert!(!r.allocator().has_job(JobId(1)));
    // m0 comes back at once, its master still running, and announces it again.
    let back = LinkId(3);
    let sends = open(&mut r, back, "m0", vec![master], at);
    assert!(
        sends
            .iter()
            .any(|(_, m)| matches!(m, FromGlobal::Kill { process } if *process == master)),
        "{sends:?}"
    );
    let (sends, _) = step(&mut r, |r| r.on_message(back, attach(master), at));
    let reason = gone_reason(&sends, back).unwrap_or_else(|| panic!("no JobGone: {sends:?}"));
    assert!(
        reason.contains("job j1 ended") && reason.contains("declared lost"),
        "{reason}"
    );
    // Never quietly attached to a new job.
    assert!(
        !sends
            .iter()
            .any(|(_, m)| matches!(m, FromGlobal::Attached { .. })),
        "{sends:?}"
    );
    assert!(!r.allocator().has_job(JobId(2)));
}

#[test]
fn a_removed_job_tells_its_attached_master_why() {
    let (mut r, _) = running_job();
    let rm = ToGlobal::RemoveJob {
        job: JobId(1),
        cluster: false,
    };
    let (sends, _) = step(&mut r, |r| r.on_message(ADMIN, rm, Duration::ZERO));
    let reason = gone_reason(&sends, LinkId(1)).unwrap_or_else(|| panic!("no JobGone: {sends:?}"));
    assert!(reason.contains("removed"), "{reason}");
}
