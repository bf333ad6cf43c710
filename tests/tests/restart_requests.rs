//! End to end, over real daemons (issue 15 item 3): an application whose
//! `AddHosts` waits for more hosts than the pool has, and whose `AddNotify`
//! subscription is live, when the global RM is killed with SIGKILL and
//! restarted, gets an answer to each (a failure naming the request) instead
//! of waiting for ever; it can then ask again and is served.

use std::collections::VecDeque;
use std::time::Duration;

use carmi_api::client::{ConnectOptions, EventStream, Incoming, connect};
use carmi_api::ids::RequestId;
use carmi_api::msg::{Event, FailureCode};
use carmi_tests::{Pool, take_event};

/// The first event that `want` picks, within 60 s (a loaded CI machine).
async fn take<T>(
    events: &mut EventStream,
    seen: &mut VecDeque<Incoming>,
    what: &str,
    want: impl FnMut(&Incoming) -> Option<T>,
) -> T {
    take_event(events, seen, Duration::from_secs(60), what, want).await
}

/// The failure of `want`, as (code, message).
fn failed(want: RequestId) -> impl FnMut(&Incoming) -> Option<(FailureCode, String)> {
    move |x: &Incoming| match x {
        Incoming::Rm(Event::Failed { request, failure }) if *request == want => {
            Some((failure.code, failure.message.clone()))
        }
        _ => None,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn requests_pending_when_the_global_rm_is_sigkilled_are_answered_after_its_restart() {
    let mut pool = Pool::start("restart-requests", 1, &[vec![], vec![]]);
    pool.wait_registered();
    let opts = ConnectOptions::new(pool.locals[0].app_addr.clone(), pool.secret.clone());
    let (carmi, mut events) = connect(opts).await.expect("connect to m0");
    let mut seen = VecDeque::new();
    let r = carmi.define_class("any", "true");
    take(&mut events, &mut seen, "class defined", |x| match x {
        Incoming::Rm(Event::Done { request, .. }) if *request == r => Some(()),
        _ => None,
    })
    .await;
    // Two hosts in the pool: the request gets them and waits for three more.
    let add = carmi.addhosts("any", 5, 1);
    for n in 0..2 {
        take(&mut events, &mut seen, &format!("host {n}"), |x| match x {
            Incoming::Rm(Event::HostsAdded { request, .. }) if *request == add => Some(()),
            _ => None,
        })
        .await;
    }
    let notify = carmi.add_notify("any");
    carmi.flush().await;
    // The subscription is accepted silently: give it time to reach the
    // global RM (and the journal) before the kill.
    let config = carmi.config();
    take(&mut events, &mut seen, "config", |x| match x {
        Incoming::Rm(Event::Done { request, .. }) if *request == config => Some(()),
        _ => None,
    })
    .await;

    pool.restart_global();

    let (code, message) = take(&mut events, &mut seen, "the AddHosts answered", failed(add)).await;
    assert_eq!(code, FailureCode::Unavailable);
    assert!(
        message.contains("the global RM restarted and lost request")
            && message.contains("AddHosts of 5 host(s) of class `any`"),
        "{message}"
    );
    let (code, message) = take(
        &mut events,
        &mut seen,
        "the AddNotify answered",
        failed(notify),
    )
    .await;
    assert_eq!(code, FailureCode::Unavailable);
    assert!(message.contains("AddNotify of class `any`"), "{message}");
    // Asked again, a host is granted by the restarted global RM.
    let again = carmi.addhosts("any", 1, 1);
    take(
        &mut events,
        &mut seen,
        "a host after the restart",
        |x| match x {
            Incoming::Rm(Event::HostsAdded { request, .. }) if *request == again => Some(()),
            _ => None,
        },
    )
    .await;
}
