//! A new job's token (issue 21): passed on to the global RM with the
//! application's `AppAttach` (again after a reconnection, while it has not
//! attached), never for a known job's process; a refusal is told to that
//! application only, whose connection alone is closed.

use super::unanswered_tests::register;
use super::*;
use carmi_proto::msg::Request;

fn registered() -> Core {
    let mut core = Core::new(1);
    register(&mut core);
    core.take_effects();
    core
}

fn attach_token(core: &mut Core) -> Vec<(ConnId, Option<String>)> {
    (core.take_effects().into_iter())
        .filter_map(|e| match e {
            Effect::ToGlobal(ToGlobal::AppAttach { conn, token, .. }, _) => Some((conn, token)),
            _ => None,
        })
        .collect()
}

#[test]
fn a_new_jobs_token_goes_to_the_global_rm_until_it_attaches() {
    let mut core = registered();
    let token = Some("alice's token".to_string());
    core.on_app_connected_with(ConnId(1), (None, None), "e".into(), token.clone());
    // A known job's process proved its credential: its token stays here.
    let known = (Some(JobId(4)), Some(ProcessId(2)));
    core.on_app_connected_with(ConnId(2), known, "e".into(), token.clone());
    assert_eq!(
        attach_token(&mut core),
        [(ConnId(1), token.clone()), (ConnId(2), None)]
    );
    // Announced again after a reconnection, with its token while unattached.
    core.on_global_lost(Vec::new());
    register(&mut core);
    assert_eq!(
        attach_token(&mut core),
        [(ConnId(1), token), (ConnId(2), None)]
    );
}

#[test]
fn a_refused_application_is_told_why_and_only_its_connection_closes() {
    let mut core = registered();
    core.on_app_connected_with(ConnId(1), (None, None), "e".into(), None);
    core.on_app_connected(ConnId(2), None, None, "e".into());
    core.on_app_request(ConnId(1), RequestId(7), Request::Config);
    core.take_effects();
    let reason =
        "permission denied: `carol` (power read) may not start a job: it needs power submit";
    core.on_global(
        FromGlobal::AttachRefused {
            conn: ConnId(1),
            reason: reason.into(),
        },
        Bytes::new(),
    );
    let effects = core.take_effects();
    assert!(
        effects.contains(&Effect::ToApp(
            ConnId(1),
            FromLocal::Refused {
                reason: reason.into()
            }
        )),
        "{effects:?}"
    );
    assert!(
        effects.contains(&Effect::CloseApp(ConnId(1))),
        "{effects:?}"
    );
    assert!(
        !effects.iter().any(|e| matches!(
            e,
            Effect::CloseApp(c) | Effect::ToApp(c, _) if *c == ConnId(2)
        )),
        "{effects:?}"
    );
    // The other application is still served.
    core.on_app_request(ConnId(2), RequestId(1), Request::Config);
    assert!(core.take_effects().iter().any(|e| matches!(
        e,
        Effect::ToGlobal(
            ToGlobal::Forward {
                conn: ConnId(2),
                ..
            },
            _
        )
    )),);
}
