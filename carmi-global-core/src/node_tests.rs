use std::time::Duration;

use carmi_proto::ids::ConnId;
use carmi_proto::msg::{StageSource, ToGlobal};

use super::*;
use crate::router::RouterConfig;
use crate::staging::StagingConfig;

const APP: LinkId = LinkId(1);
const M1: LinkId = LinkId(2);
const SHA: &str = "cccccccccccccccccccccccccccccccccccccccccccccccccccccccccccccccc";

fn core() -> GlobalCore {
    let router = Router::new(RouterConfig::default());
    GlobalCore::new(router, Staging::new(StagingConfig::default()))
}

/// `APP` opened as machine m0's local RM.
fn open_app(core: &mut GlobalCore, now: Duration) {
    let role = Role::Local { name: "m0".into() };
    let opened = Input::Opened {
        link: APP,
        role,
        identity: None,
    };
    core.on_input(opened, now);
}

/// A new job's first process attaching through `APP` as connection `conn`.
fn attach(core: &mut GlobalCore, conn: u64, now: Duration) {
    let msg = ToGlobal::AppAttach {
        conn: ConnId(conn),
        job: None,
        process: None,
        endpoint: "10.0.0.1:4000".into(),
        token: None,
    };
    let msg = Box::new(Decoded::new(msg, &RouterConfig::default()));
    core.on_input(
        Input::Message {
            link: APP,
            msg,
            at: now,
        },
        now,
    );
}

fn sends(effects: &[Effect]) -> Vec<(LinkId, &FromGlobal)> {
    effects
        .iter()
        .filter_map(|e| match e {
            Effect::Router(Output::Send { link, msg }) => Some((*link, msg)),
            _ => None,
        })
        .collect()
}

#[test]
fn an_attach_goes_out_after_its_jobs_credential_and_after_its_record() {
    let mut core = core();
    let now = Duration::from_secs(1);
    open_app(&mut core, now);
    attach(&mut core, 1, now);
    let batch = core.take_batch();
    // The new job is on disk before anyone hears of it.
    assert!(!batch.records.is_empty(), "{batch:?}");
    assert!(batch.next_job_id > 0);
    let [
        Effect::Credential { link, job },
        Effect::Router(Output::Send { msg, .. }),
    ] = &batch.effects[..]
    else {
        panic!(
            "expected a credential, then the attach: {:?}",
            batch.effects
        );
    };
    assert_eq!(*link, APP);
    assert!(matches!(msg, FromGlobal::Attached { job: j, .. } if j == job));
    assert!(core.take_batch().is_empty());
}

#[test]
fn a_link_that_stops_reading_is_kicked_once_and_sent_nothing_more() {
    let mut core = core();
    let now = Duration::from_secs(1);
    open_app(&mut core, now);
    core.on_unread(APP);
    core.on_unread(APP);
    attach(&mut core, 1, now);
    let batch = core.take_batch();
    assert_eq!(batch.effects, vec![Effect::Kick { link: APP }]);
    // Found unread while a batch is carried out: kicked after it, once.
    core.on_unread(M1);
    core.on_unread(M1);
    assert_eq!(core.take_kicks(), vec![M1]);
    assert!(core.take_kicks().is_empty());
    // Its end forgets the kick: a new link of the same id is served.
    core.on_input(Input::Closed { link: APP }, now);
    let _ = core.take_batch();
    open_app(&mut core, now);
    attach(&mut core, 2, now);
    assert_eq!(sends(&core.take_batch().effects).len(), 1);
}

#[test]
fn staging_hears_of_local_links_and_stored_files_with_the_router() {
    let mut core = core();
    let now = Duration::from_secs(1);
    let role = Role::Local { name: "m1".into() };
    core.on_input(
        Input::Opened {
            link: M1,
            role,
            identity: None,
        },
        now,
    );
    let fetch = || {
        Input::Stage(StageInput::Fetch {
            link: M1,
            sha256: SHA.into(),
        })
    };
    core.on_input(fetch(), now);
    let batch = core.take_batch();
    assert!(
        matches!(
            sends(&batch.effects)[..],
            [(M1, FromGlobal::NoExecutable { .. })]
        ),
        "{batch:?}"
    );
    let exe = ExecutableRef {
        name: "w".into(),
        sha256: SHA.into(),
        size: 3,
    };
    core.on_input(Input::Stored(exe), now);
    core.on_input(fetch(), now);
    let batch = core.take_batch();
    assert!(
        matches!(
            sends(&batch.effects)[..],
            [(
                M1,
                FromGlobal::FetchFrom {
                    source: StageSource::Global,
                    ..
                }
            )]
        ),
        "{batch:?}"
    );
}

#[test]
fn only_what_puts_a_process_of_the_job_on_a_machine_needs_a_credential() {
    use carmi_proto::ids::{JobId, ProcessId};
    let attached = FromGlobal::Attached {
        conn: ConnId(1),
        job: JobId(4),
        process: ProcessId(9),
    };
    assert_eq!(needs_credential(&attached), Some(JobId(4)));
    let kill = FromGlobal::Kill {
        process: ProcessId(9),
    };
    assert_eq!(needs_credential(&kill), None);
}
