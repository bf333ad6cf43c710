//! Concurrency limits and accounting groups through the router (issue 32):
//! the limits come from the configuration, the job's names from its submit
//! file's attributes; `carmi q` says which limit a job waits for, and
//! `carmi userprio` lists the accounting group.

use carmi_proto::msg::UserPrioRequest;

use super::door::submit_msg;
use super::*;

fn router(limits: &[(&str, f64)]) -> Router {
    let mut config = RouterConfig::default();
    config.concurrency_limits.limits = limits.iter().map(|&(n, v)| (n.into(), v)).collect();
    let mut r = Router::new(config);
    advertise(&mut r, LinkId(1), "m0", vec![]);
    advertise(&mut r, LinkId(2), "m1", vec![]);
    r.on_executable_stored(&exe("master"));
    step(&mut r, |r| {
        r.on_link_opened(ADMIN, Role::Admin, Duration::ZERO)
    });
    r
}

fn submit(r: &mut Router, text: &str) -> JobId {
    let spec = carmi_proto::submit::parse("j", text).unwrap();
    let (sends, _) = step(r, |r| r.on_message(ADMIN, submit_msg(spec), Duration::ZERO));
    match &sends[..] {
        [(ADMIN, FromGlobal::Submitted { job }), ..] => *job,
        other => panic!("{other:?}"),
    }
}

fn queue(r: &mut Router) -> Vec<carmi_proto::msg::JobStatus> {
    let (sends, _) = step(r, |r| r.on_message(ADMIN, ToGlobal::Queue, Duration::ZERO));
    match sends.into_iter().next() {
        Some((ADMIN, FromGlobal::Queue(q))) => q,
        other => panic!("{other:?}"),
    }
}

#[test]
fn a_job_waiting_for_a_concurrency_limit_says_so_and_starts_when_it_frees() {
    let mut r = router(&[("matlab", 1.0)]);
    let sub = "executable = master\n+ConcurrencyLimits = \"matlab\"\nqueue\n";
    let j1 = submit(&mut r, sub);
    let j2 = submit(&mut r, sub);
    let q = queue(&mut r);
    assert_eq!(q[0].state, "running");
    assert_eq!((q[1].job, q[1].state.as_str()), (j2, "waiting"));
    assert_eq!(
        q[1].note.as_deref(),
        Some("waits for concurrency limit matlab (1 of 1 in use)")
    );
    // `carmi rm` of the first frees the licence.
    let rm = ToGlobal::RemoveJob {
        job: j1,
        cluster: false,
    };
    step(&mut r, |r| r.on_message(ADMIN, rm, Duration::ZERO));
    let q = queue(&mut r);
    assert_eq!((q[0].job, q[0].state.as_str()), (j2, "running"), "{q:?}");
}

#[test]
fn userprio_lists_the_accounting_group_a_job_is_charged_to() {
    let mut r = router(&[]);
    let j = submit(
        &mut r,
        "executable = master\n+AccountingGroup = \"physics.alice\"\nqueue\n",
    );
    assert_eq!(r.allocator().job_user(j), "physics.alice");
    step(&mut r, |r| r.on_tick(Duration::from_secs(5)));
    let (sends, _) = step(&mut r, |r| {
        r.on_message(
            ADMIN,
            ToGlobal::UserPrio(UserPrioRequest::List),
            Duration::from_secs(5),
        )
    });
    let [(ADMIN, FromGlobal::Users(users))] = &sends[..] else {
        panic!("{sends:?}");
    };
    let names: Vec<&str> = users.iter().map(|u| u.user.as_str()).collect();
    assert_eq!(names, ["physics.alice"]);
    assert!(users[0].usage_hours > 0.0, "{users:?}");
    // `carmi q` shows the group's standing beside the job.
    let q = queue(&mut r);
    assert!(q[0].user.as_ref().is_some_and(|u| u.usage_hours > 0.0));
}
