//! Stored files no live job refers to are removed after `store_keep`
//! (issue 38): an upload nobody submitted, then an ended job's executable;
//! a live job's files stay however old.

use std::time::Duration;

use carmi_proto::msg::{ExecutableRef, Role, SubmitRequest, ToGlobal};

use super::{LinkId, Output, Router, RouterConfig};

const ADMIN: LinkId = LinkId(100);

fn file(name: &str, fill: &str) -> ExecutableRef {
    ExecutableRef {
        name: name.into(),
        sha256: fill.repeat(32),
        size: 10,
    }
}

/// The hashes dropped by a tick at second `at`.
fn dropped_at(r: &mut Router, at: u64) -> Vec<String> {
    r.on_tick(Duration::from_secs(at));
    r.sanity_check();
    r.take_outputs()
        .into_iter()
        .filter_map(|o| match o {
            Output::DropStored { sha256 } => Some(sha256),
            _ => None,
        })
        .collect()
}

#[test]
fn files_no_live_job_refers_to_are_removed_after_their_keep() {
    let mut r = Router::new(RouterConfig {
        heartbeat: Duration::from_secs(3600),
        store_keep: Duration::from_secs(600),
        ..RouterConfig::default()
    });
    let (master, input, junk) = (
        file("master", "ab"),
        file("in.dat", "cd"),
        file("junk", "ef"),
    );
    for f in [&master, &input, &junk] {
        r.on_executable_stored(f);
    }
    r.on_link_opened(ADMIN, Role::Admin, Duration::ZERO);
    let mut spec = carmi_proto::submit::parse("job.sub", "executable = master\nqueue\n").unwrap();
    spec.input_refs = vec![input.clone()];
    let submit = ToGlobal::Submit(Box::new(SubmitRequest {
        owner: "alice".into(),
        machine: "laptop".into(),
        executable: master.clone(),
        spec,
        submitted_unix: 0,
        anywhere: true,
        procs: Vec::new(),
        max_materialize: None,
        max_idle: None,
    }));
    r.on_message(ADMIN, submit, Duration::from_secs(1));
    r.take_outputs();
    assert!(dropped_at(&mut r, 300).is_empty(), "nothing is stale yet");
    // The job waits (no machine) and lives: only the upload nobody submitted goes.
    assert_eq!(dropped_at(&mut r, 700), vec![junk.sha256.clone()]);
    assert!(
        dropped_at(&mut r, 5_000).is_empty(),
        "a live job's files stay"
    );
    let job = r.queue_status()[0].job;
    r.on_message(
        ADMIN,
        ToGlobal::RemoveJob {
            job,
            cluster: false,
        },
        Duration::from_secs(5_000),
    );
    r.take_outputs();
    // Its files were last used at its submit, long ago: gone at the next sweep.
    let mut gone = dropped_at(&mut r, 5_100);
    gone.sort();
    assert_eq!(gone, vec![master.sha256.clone(), input.sha256.clone()]);
    // A submit naming a dropped file is refused: it must be uploaded again.
    let again = ToGlobal::Submit(Box::new(SubmitRequest {
        owner: "alice".into(),
        machine: "laptop".into(),
        executable: master,
        spec: carmi_proto::submit::parse("job.sub", "executable = master\nqueue\n").unwrap(),
        submitted_unix: 0,
        anywhere: true,
        procs: Vec::new(),
        max_materialize: None,
        max_idle: None,
    }));
    r.on_message(ADMIN, again, Duration::from_secs(5_200));
    let refused = r.take_outputs().into_iter().any(|o| {
        matches!(o, Output::Send { msg: carmi_proto::msg::FromGlobal::AdminFailed(f), .. }
            if f.message.contains("was not uploaded"))
    });
    assert!(refused, "a dropped file was still taken as stored");
}
