//! The router's refusals say who, what and the missing power in words a
//! person reads as written (issue 21), for the requests that `carmi`'s
//! end-to-end matrix (`tests/tests/authz.rs`) does not send.

use std::time::Duration;

use carmi_proto::authz::{Identity, Power};
use carmi_proto::msg::{AllocRequest, FailureCode, FromGlobal, Role, ToGlobal};

use super::{LinkId, Output, Router, RouterConfig};

const ALICE: LinkId = LinkId(3);

/// What the router answers `msg` on a connection of alice's with `power`.
fn answer(power: Power, msg: ToGlobal) -> Vec<FromGlobal> {
    let mut r = Router::new(RouterConfig::default());
    r.on_link_opened(ALICE, Role::Admin, Duration::ZERO);
    let who = Identity {
        name: "alice".into(),
        power,
        machine: None,
        token: "t1".into(),
    };
    r.on_link_identity(ALICE, who);
    r.on_message(ALICE, msg, Duration::ZERO);
    (r.take_outputs().into_iter())
        .filter_map(|o| match o {
            Output::Send { link: ALICE, msg } => Some(msg),
            _ => None,
        })
        .collect()
}

#[test]
fn managing_allocation_queues_needs_admin_and_says_so() {
    let got = answer(
        Power::Submit,
        ToGlobal::Alloc(AllocRequest::Pause { queue: 1 }),
    );
    let [FromGlobal::AdminFailed(f)] = &got[..] else {
        panic!("{got:?}");
    };
    assert_eq!(f.code, FailureCode::Denied);
    assert_eq!(
        f.message,
        "permission denied: `alice` (power submit) may not manage allocation queues: \
         it needs power admin"
    );
    // Listing them is looking: allowed.
    let got = answer(Power::Read, ToGlobal::Alloc(AllocRequest::List));
    assert!(
        !got.iter().any(|m| matches!(m, FromGlobal::AdminFailed(_))),
        "{got:?}"
    );
}

#[test]
fn refusals_are_counted_for_the_metrics_and_allowed_requests_are_not() {
    let mut r = Router::new(RouterConfig::default());
    r.on_link_opened(ALICE, Role::Admin, Duration::ZERO);
    r.on_link_identity(ALICE, who("alice", Power::Read));
    r.on_message(ALICE, ToGlobal::Alloc(AllocRequest::List), Duration::ZERO);
    assert_eq!(r.denials(), 0);
    for queue in [1, 2] {
        let pause = ToGlobal::Alloc(AllocRequest::Pause { queue });
        r.on_message(ALICE, pause, Duration::ZERO);
    }
    assert_eq!(r.denials(), 2);
}

/// A router with machine m0 registered by its daemon token (so the pool
/// has tokens), and what it answers an application at m0 that starts a new
/// job with the token verdict `verdict` (`None`: no token presented).
fn start_job_at_m0(
    verdict: Option<Result<Identity, String>>,
) -> (Router, Vec<FromGlobal>, Vec<super::super::journal::Record>) {
    use super::hand_tests::{CONN, advertise, step};
    let m0 = LinkId(1);
    let mut r = Router::new(RouterConfig::default());
    let daemon = Identity {
        name: "m0".into(),
        power: Power::Daemon,
        machine: Some("m0".into()),
        token: "d0".into(),
    };
    step(&mut r, |r| {
        r.on_link_opened(m0, Role::Local { name: "m0".into() }, Duration::ZERO)
    });
    r.on_link_identity(m0, daemon);
    advertise(&mut r, m0, "m0", vec![]);
    if let Some(v) = verdict {
        r.on_app_identity(m0, CONN, v);
    }
    let attach = ToGlobal::AppAttach {
        conn: CONN,
        job: None,
        process: None,
        endpoint: "127.0.0.1:1".into(),
        token: Some("the driver checked it".into()),
    };
    let (sends, records) = step(&mut r, |r| r.on_message(m0, attach, Duration::ZERO));
    (r, sends.into_iter().map(|(_, m)| m).collect(), records)
}

fn who(name: &str, power: Power) -> Identity {
    Identity {
        name: name.into(),
        power,
        machine: None,
        token: format!("t-{name}"),
    }
}

#[test]
fn a_new_job_at_a_local_rm_needs_a_token_that_may_submit_and_is_owned_by_it() {
    let refused = |verdict| {
        let (_, got, records) = start_job_at_m0(verdict);
        assert!(
            records.is_empty(),
            "a refused job is not journaled: {records:?}"
        );
        match &got[..] {
            [FromGlobal::AttachRefused { reason, .. }] => reason.clone(),
            other => panic!("{other:?}"),
        }
    };
    assert_eq!(
        refused(Some(Ok(who("carol", Power::Read)))),
        "permission denied: `carol` (power read) may not start a job: it needs power submit"
    );
    let none = refused(None);
    assert!(
        none.contains("without a token") && none.contains("power submit"),
        "{none}"
    );
    let revoked = refused(Some(Err("token refused: token t9 is revoked".into())));
    assert!(revoked.contains("t9 is revoked"), "{revoked}");

    let (mut r, got, records) = start_job_at_m0(Some(Ok(who("alice", Power::Submit))));
    assert!(matches!(&got[..], [FromGlobal::Attached { .. }]), "{got:?}");
    let [super::super::journal::Record::Attached { owner, .. }] = &records[..] else {
        panic!("{records:?}");
    };
    assert_eq!(owner.as_deref(), Some("alice"));
    let q = r.queue_status();
    assert_eq!(q[0].owner, "alice");
    // After a restart the journal keeps the owner.
    let mut again = Router::new(RouterConfig::default());
    again.recover(records);
    assert_eq!(again.queue_status()[0].owner, "alice");
}
