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
