//! Requests forwarded before the link to the global RM broke and never
//! answered (issue 15 item 3): after the reconnection, the re-announcing
//! `AppAttach` is followed by `Unanswered` with exactly those requests, so
//! that a restarted global RM that never read them fails them instead of
//! leaving the application waiting.

use super::*;
use carmi_proto::msg::{Event, Failure, FailureCode, Reply, Request};

const CONN: ConnId = ConnId(1);

fn registered() -> Core {
    let mut core = Core::new(1);
    register(&mut core);
    core
}

/// Connects `core` to the global RM and registers it with one host.
pub(super) fn register(core: &mut Core) {
    core.on_global_connected("[]".into());
    core.on_global(
        FromGlobal::Registered {
            hosts: vec![HostId(1)],
            heartbeat_ms: 1000,
        },
        Bytes::new(),
    );
}

/// What the core sends the global RM, in order (everything else dropped).
fn to_global(core: &mut Core) -> Vec<ToGlobal> {
    core.take_effects()
        .into_iter()
        .filter_map(|e| match e {
            Effect::ToGlobal(m, _) => Some(m),
            _ => None,
        })
        .collect()
}

fn deliver(core: &mut Core, event: Event) {
    core.on_global(FromGlobal::Deliver { conn: CONN, event }, Bytes::new());
}

#[test]
fn requests_without_an_answer_are_named_after_a_reconnection() {
    let mut core = registered();
    core.on_app_connected(CONN, None, None, "e".into());
    core.on_global(
        FromGlobal::Attached {
            conn: CONN,
            job: JobId(1),
            process: ProcessId(1),
        },
        Bytes::new(),
    );
    for id in 1..=4 {
        core.on_app_request(CONN, RequestId(id), Request::Config);
    }
    core.take_effects();
    // r1 answered, r2 failed, r3 told of a host: only r4 had no event.
    deliver(
        &mut core,
        Event::Done {
            request: RequestId(1),
            reply: Reply::Ok,
        },
    );
    let failure = Failure {
        code: FailureCode::Invalid,
        message: "no".into(),
    };
    deliver(
        &mut core,
        Event::Failed {
            request: RequestId(2),
            failure,
        },
    );
    deliver(
        &mut core,
        Event::HostDeleted {
            request: RequestId(3),
            host: HostId(1),
            reason: "gone".into(),
        },
    );
    // r5 was handed to the link but never written: sent again, not named.
    core.on_app_request(CONN, RequestId(5), Request::Config);
    let unsent: Vec<(ToGlobal, Bytes)> = to_global(&mut core)
        .into_iter()
        .map(|m| (m, Bytes::new()))
        .collect();
    core.on_global_lost(unsent);
    core.take_effects();
    register(&mut core);
    let sent = to_global(&mut core);
    let at = sent
        .iter()
        .position(|m| matches!(m, ToGlobal::AppAttach { conn: CONN, .. }))
        .expect("announced again");
    assert_eq!(
        sent[at + 1..],
        [
            ToGlobal::Unanswered {
                conn: CONN,
                requests: vec![RequestId(4)]
            },
            ToGlobal::Forward {
                conn: CONN,
                id: RequestId(5),
                body: Request::Config
            }
        ]
    );
    // r4 is told once: a second reconnection names only r5, still unanswered.
    core.on_global_lost(vec![]);
    register(&mut core);
    let sent = to_global(&mut core);
    let told: Vec<_> = sent
        .iter()
        .filter(|m| matches!(m, ToGlobal::Unanswered { .. }))
        .collect();
    assert_eq!(
        told,
        [&ToGlobal::Unanswered {
            conn: CONN,
            requests: vec![RequestId(5)]
        }]
    );
}

/// Issue 15, "nothing stuck": the global RM says the application's job
/// ended; every request it still waits for fails naming why, it is told,
/// and its connection is closed, after what was written to it.
#[test]
fn an_application_whose_job_ended_hears_why_and_is_closed() {
    let mut core = registered();
    core.on_app_connected(CONN, None, None, "e".into());
    core.on_global(
        FromGlobal::Attached {
            conn: CONN,
            job: JobId(1),
            process: ProcessId(1),
        },
        Bytes::new(),
    );
    core.on_app_request(CONN, RequestId(7), Request::Config);
    core.take_effects();
    let reason = "job j1 ended: the machine its master ran on was declared lost".to_string();
    core.on_global(
        FromGlobal::JobGone {
            conn: CONN,
            job: JobId(1),
            reason: reason.clone(),
        },
        Bytes::new(),
    );
    let failure = Failure {
        code: FailureCode::Unavailable,
        message: reason.clone(),
    };
    assert_eq!(
        core.take_effects(),
        vec![
            Effect::ToApp(
                CONN,
                FromLocal::Event(Event::Failed {
                    request: RequestId(7),
                    failure
                })
            ),
            Effect::ToApp(
                CONN,
                FromLocal::JobEnded {
                    job: JobId(1),
                    reason
                }
            ),
            Effect::CloseApp(CONN),
        ]
    );
    core.sanity_check();
    // Forgotten: its later close announces nothing to the global RM.
    core.on_app_closed(CONN);
    assert!(to_global(&mut core).is_empty());
}

/// A request made while the global RM is away is held, not failed: a
/// restart of the global RM is no error the application must handle. It
/// follows the re-announcing `AppAttach`, in order with one that was written
/// to the broken link but never left.
#[test]
fn requests_made_while_the_global_rm_is_away_are_sent_once_it_is_back() {
    let mut core = registered();
    core.on_app_connected(CONN, None, None, "e".into());
    core.take_effects();
    core.on_app_request(CONN, RequestId(1), Request::Config);
    let unsent: Vec<(ToGlobal, Bytes)> = to_global(&mut core)
        .into_iter()
        .map(|m| (m, Bytes::new()))
        .collect();
    core.on_time(10.0);
    core.on_global_lost(unsent);
    core.on_time(20.0);
    core.on_app_request(CONN, RequestId(2), Request::Processes);
    core.on_time(39.0);
    let effects = core.take_effects();
    assert!(
        !effects.iter().any(|e| matches!(
            e,
            Effect::ToApp(..) | Effect::ToGlobal(ToGlobal::Forward { .. }, _)
        )),
        "nothing failed, nothing sent: {effects:?}"
    );
    register(&mut core);
    let sent = to_global(&mut core);
    let at = sent
        .iter()
        .position(|m| matches!(m, ToGlobal::AppAttach { conn: CONN, .. }))
        .expect("announced again");
    let forward = |id, body| ToGlobal::Forward {
        conn: CONN,
        id: RequestId(id),
        body,
    };
    assert_eq!(
        sent[at + 1..],
        [forward(1, Request::Config), forward(2, Request::Processes)]
    );
    core.sanity_check();
}

/// A global RM that stays away: a held request fails after
/// [`HOLD_WHILE_AWAY`], saying why, and the daemon is asked to wake for it.
#[test]
fn a_request_held_too_long_fails_as_unavailable() {
    let mut core = Core::new(1);
    core.on_time(5.0);
    core.on_app_connected(CONN, None, None, "e".into());
    core.on_app_request(CONN, RequestId(3), Request::Config);
    assert_eq!(core.next_deadline(), Some(5.0 + HOLD_WHILE_AWAY));
    core.on_time(5.0 + HOLD_WHILE_AWAY - 0.1);
    assert!(core.take_effects().is_empty());
    core.on_time(5.0 + HOLD_WHILE_AWAY);
    let effects = core.take_effects();
    let [Effect::ToApp(CONN, FromLocal::Event(Event::Failed { request, failure }))] = &effects[..]
    else {
        panic!("one failure expected: {effects:?}");
    };
    assert_eq!(
        (*request, failure.code),
        (RequestId(3), FailureCode::Unavailable)
    );
    assert!(
        failure.message.contains("not been connected"),
        "{}",
        failure.message
    );
    assert_eq!(core.next_deadline(), None);
}
