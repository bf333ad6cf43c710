//! Submit from anywhere at the router: where a master is placed, a job that
//! waits for a machine its `master_requirements` accept, the files a master
//! sends back, and the placement surviving a restart.

use std::time::Duration;

use carmi_proto::ids::{JobId, ProcessId};
use carmi_proto::msg::{
    ExecutableRef, ExitStatus, FromGlobal, JobFiles, ReturnedFile, Role, SubmitRequest, ToGlobal,
};

use super::{LinkId, Output, Router, RouterConfig};
use crate::journal::Record;

const ADMIN: LinkId = LinkId(100);

fn exe() -> ExecutableRef {
    ExecutableRef {
        name: "master".into(),
        sha256: "cd".repeat(32),
        size: 10,
    }
}

/// What one input produced, invariants checked.
fn step(r: &mut Router, f: impl FnOnce(&mut Router)) -> Vec<Output> {
    f(r);
    r.sanity_check();
    r.take_outputs()
}

fn sends(out: &[Output]) -> Vec<(LinkId, FromGlobal)> {
    out.iter()
        .filter_map(|o| match o {
            Output::Send { link, msg } => Some((*link, msg.clone())),
            _ => None,
        })
        .collect()
}

fn records(out: &[Output]) -> Vec<Record> {
    out.iter()
        .filter_map(|o| match o {
            Output::Journal(r) => Some(r.clone()),
            _ => None,
        })
        .collect()
}

/// Where `SpawnMaster`s went, with their output and the files asked back.
fn masters(out: &[Output]) -> Vec<(LinkId, ProcessId, Option<String>, Vec<String>)> {
    sends(out)
        .into_iter()
        .filter_map(|(l, m)| match m {
            FromGlobal::SpawnMaster {
                process,
                output,
                return_files,
                ..
            } => Some((l, process, output, return_files)),
            _ => None,
        })
        .collect()
}

fn advertise(r: &mut Router, link: LinkId, name: &str, memory: u32) -> Vec<Output> {
    step(r, |r| {
        r.on_link_opened(link, Role::Local { name: name.into() }, Duration::ZERO)
    });
    let msg = ToGlobal::Advertise {
        ad: format!("[ Name = \"{name}\"; Memory = {memory} ]"),
        slots: 1,
        running: vec![],
    };
    step(r, |r| r.on_message(link, msg, Duration::ZERO))
}

fn submit(r: &mut Router, file: &str, machine: &str, anywhere: bool) -> Vec<Output> {
    let spec = carmi_proto::submit::parse("job.sub", file).unwrap();
    let msg = ToGlobal::Submit(Box::new(SubmitRequest {
        owner: "alice".into(),
        machine: machine.into(),
        executable: exe(),
        spec,
        submitted_unix: 0,
        anywhere,
        procs: Vec::new(),
        max_materialize: None,
        max_idle: None,
    }));
    step(r, |r| r.on_message(ADMIN, msg, Duration::ZERO))
}

fn router() -> Router {
    let mut r = Router::new(RouterConfig::default());
    r.on_executable_stored(&exe());
    step(&mut r, |r| {
        r.on_link_opened(ADMIN, Role::Admin, Duration::ZERO)
    });
    r
}

const BIG: &str = "executable = master\noutput = /home/alice/run/out.txt\ntransfer_output_files = res/result.dat\ninitialdir = /home/alice/run\nmaster_requirements = Memory >= 2000\nmachine_count = 1..1\nqueue\n";

#[test]
fn a_master_from_outside_the_pool_runs_where_its_requirements_allow() {
    let mut r = router();
    let (m0, m1) = (LinkId(1), LinkId(2));
    advertise(&mut r, m0, "m0", 1000);
    advertise(&mut r, m1, "m1", 4000);
    let out = submit(&mut r, BIG, "laptop", true);
    // m1 alone has the memory; its output comes back rather than being
    // written at a path of the laptop.
    let placed = masters(&out);
    assert_eq!(placed.len(), 1, "{out:?}");
    let (link, _, output, back) = &placed[0];
    assert_eq!((*link, output.clone()), (m1, None));
    assert_eq!(back, &["stdout", "res/result.dat"]);
    assert!(
        records(&out).iter().any(|rec| matches!(rec,
            Record::Started { placed: Some(m), .. } if m == "m1")),
        "{out:?}"
    );
}

#[test]
fn a_pinned_or_pool_submit_machine_keeps_the_master_and_writes_in_place() {
    let mut r = router();
    let (m0, m1) = (LinkId(1), LinkId(2));
    advertise(&mut r, m0, "m0", 1000);
    advertise(&mut r, m1, "m1", 4000);
    // The submit machine is in the pool: the master stays there, whatever
    // its requirements say, and writes its output itself.
    let out = submit(&mut r, BIG, "m0", true);
    let placed = masters(&out);
    assert_eq!(placed[0].0, m0);
    assert_eq!(placed[0].2.as_deref(), Some("/home/alice/run/out.txt"));
    assert_eq!(placed[0].3, ["res/result.dat"]);
    // Pinned to a machine that is not in the pool: refused, as before.
    let out = submit(&mut r, BIG, "laptop", false);
    assert!(
        matches!(&sends(&out)[..], [(_, FromGlobal::AdminFailed(f))] if f.message.contains("not in the pool")),
        "{out:?}"
    );
}

#[test]
fn masters_spread_over_the_machines_with_fewest_masters() {
    let mut r = router();
    for (i, name) in ["m0", "m1", "m2"].iter().enumerate() {
        advertise(&mut r, LinkId(i as u64 + 1), name, 4000);
    }
    let file = "executable = master\nmachine_count = 0..1\nqueue\n";
    let mut links: Vec<LinkId> = (0..3)
        .flat_map(|_| masters(&submit(&mut r, file, "laptop", true)))
        .map(|(l, ..)| l)
        .collect();
    links.sort();
    assert_eq!(links, [LinkId(1), LinkId(2), LinkId(3)]);
}

#[test]
fn with_no_matching_machine_the_master_waits_and_q_says_why() {
    let mut r = router();
    advertise(&mut r, LinkId(1), "m0", 1000);
    let file =
        "executable = master\nmaster_requirements = Memory >= 2000\nmachine_count = 0..1\nqueue\n";
    let out = submit(&mut r, file, "laptop", true);
    assert!(masters(&out).is_empty(), "{out:?}");
    let out = step(&mut r, |r| {
        r.on_message(ADMIN, ToGlobal::Queue, Duration::ZERO)
    });
    let [(_, FromGlobal::Queue(q))] = &sends(&out)[..] else {
        panic!("{out:?}")
    };
    let note = q[0].note.clone().unwrap_or_default();
    assert!(note.contains("Memory >= 2000"), "{note}");
    // A machine that matches arrives: the master goes there.
    let out = advertise(&mut r, LinkId(2), "big", 8000);
    let placed = masters(&out);
    assert_eq!(placed.len(), 1, "{out:?}");
    assert_eq!(placed[0].0, LinkId(2));
}

#[test]
fn files_sent_back_are_kept_with_the_history_and_fetched() {
    let mut r = router();
    let m1 = LinkId(2);
    advertise(&mut r, LinkId(1), "m0", 1000);
    advertise(&mut r, m1, "m1", 4000);
    let out = submit(&mut r, BIG, "laptop", true);
    let master = masters(&out)[0].1;
    let started = ToGlobal::Started {
        process: master,
        result: Ok(()),
    };
    step(&mut r, |r| r.on_message(m1, started, Duration::ZERO));
    // Another machine cannot send files in the master's name.
    let file = |name: &str, size| ReturnedFile {
        name: name.into(),
        size,
        truncated: false,
        dest: String::new(),
    };
    let forged = ToGlobal::MasterFiles {
        process: master,
        files: vec![file("stdout", 1)],
    };
    let out = step(&mut r, |r| r.on_message(LinkId(1), forged, Duration::ZERO));
    assert!(
        out.iter()
            .any(|o| matches!(o, Output::DropFiles { process } if *process == master)),
        "{out:?}"
    );
    let back = ToGlobal::MasterFiles {
        process: master,
        files: vec![
            file("stdout", 3),
            file("res/result.dat", 2),
            file("other", 1),
        ],
    };
    step(&mut r, |r| r.on_message(m1, back, Duration::ZERO));
    // Asked for before the end: not yet.
    let fetch = ToGlobal::FetchFiles { job: JobId(1) };
    let out = step(&mut r, |r| {
        r.on_message(ADMIN, fetch.clone(), Duration::ZERO)
    });
    assert!(
        matches!(&sends(&out)[..], [(_, FromGlobal::AdminFailed(_))]),
        "{out:?}"
    );
    let exited = ToGlobal::Exited {
        process: master,
        status: ExitStatus::Code(3),
        cpu_seconds: 0.5,
        usage: Default::default(),
    };
    let out = step(&mut r, |r| r.on_message(m1, exited, Duration::ZERO));
    let history = records(&out)
        .into_iter()
        .find_map(|rec| match rec {
            Record::History(h) => Some(h),
            _ => None,
        })
        .expect("a history record");
    let want = JobFiles {
        process: master,
        files: vec![
            ReturnedFile {
                dest: "/home/alice/run/out.txt".into(),
                ..file("stdout", 3)
            },
            ReturnedFile {
                dest: "/home/alice/run/result.dat".into(),
                ..file("res/result.dat", 2)
            },
        ],
    };
    assert_eq!(history.files.as_ref(), Some(&want));
    let out = step(&mut r, |r| r.on_message(ADMIN, fetch, Duration::ZERO));
    assert!(
        out.iter().any(
            |o| matches!(o, Output::SendFiles { link, files } if *link == ADMIN && *files == want)
        ),
        "{out:?}"
    );
}

#[test]
fn a_placed_master_is_expected_back_on_its_machine_after_a_restart() {
    let mut r = router();
    let mut journal = Vec::new();
    journal.extend(records(&advertise(&mut r, LinkId(1), "m0", 1000)));
    journal.extend(records(&advertise(&mut r, LinkId(2), "m1", 4000)));
    let out = submit(&mut r, BIG, "laptop", true);
    let master = masters(&out)[0].1;
    journal.extend(records(&out));
    let mut again = Router::new(RouterConfig::default());
    again.recover(journal);
    again.on_executable_stored(&exe());
    let m1 = LinkId(7);
    step(&mut again, |r| {
        r.on_link_opened(m1, Role::Local { name: "m1".into() }, Duration::ZERO)
    });
    let msg = ToGlobal::Advertise {
        ad: "[ Name = \"m1\"; Memory = 4000 ]".into(),
        slots: 1,
        running: vec![master],
    };
    // m1 still runs the master: it is neither killed nor started again.
    let out = step(&mut again, |r| r.on_message(m1, msg, Duration::ZERO));
    assert!(
        !sends(&out)
            .iter()
            .any(|(_, m)| matches!(m, FromGlobal::Kill { .. } | FromGlobal::SpawnMaster { .. })),
        "{out:?}"
    );
}

#[test]
fn a_placed_master_whose_machine_is_lost_starts_again_elsewhere() {
    let mut r = router();
    let (m0, m1) = (LinkId(1), LinkId(2));
    advertise(&mut r, m0, "m0", 4000);
    advertise(&mut r, m1, "m1", 4000);
    let mut journal = Vec::new();
    let file = "executable = master\noutput = /home/alice/out.txt\nmachine_count = 1..1\nqueue\n";
    let out = submit(&mut r, file, "laptop", true);
    journal.extend(records(&out));
    let [(link, first, ..)] = &masters(&out)[..] else {
        panic!("{out:?}")
    };
    let (first, kept) = (*first, if *link == m0 { m1 } else { m0 });
    // Only the other machine keeps sending heartbeats.
    let beat = ToGlobal::Heartbeat {
        update: String::new(),
    };
    step(&mut r, |r| {
        r.on_message(kept, beat, Duration::from_millis(2500))
    });
    let out = step(&mut r, |r| r.on_tick(Duration::from_secs(4)));
    journal.extend(records(&out));
    let again = masters(&out);
    assert_eq!(again.len(), 1, "{out:?}");
    let (link, second, output, back) = &again[0];
    assert_eq!(*link, kept);
    assert_ne!(*second, first);
    // Placed away from the submit machine: its output comes back.
    assert_eq!(
        (output.clone(), back.clone()),
        (None, vec!["stdout".to_string()])
    );
    assert!(
        !records(&out)
            .iter()
            .any(|rec| matches!(rec, Record::History(_))),
        "the job did not end: {out:?}"
    );
    // A pinned job would have ended; this one is still queued.
    let out = step(&mut r, |r| {
        r.on_message(ADMIN, ToGlobal::Queue, Duration::from_secs(4))
    });
    let [(_, FromGlobal::Queue(q))] = &sends(&out)[..] else {
        panic!("{out:?}")
    };
    assert_eq!(q[0].master, Some(*second));
    // The event log says why a second master started.
    let lost_name = if kept == m0 { "m1" } else { "m0" };
    let out = step(&mut r, |r| {
        let ask = ToGlobal::Events {
            job: q[0].job,
            after: 0,
        };
        r.on_message(ADMIN, ask, Duration::from_secs(4))
    });
    let [(_, FromGlobal::Events { events, .. })] = &sends(&out)[..] else {
        panic!("{out:?}")
    };
    let lines: Vec<String> = events.iter().map(|e| e.kind.to_string()).collect();
    assert!(
        lines.contains(&format!("master-lost {lost_name}")),
        "{lines:?}"
    );
    // After a restart of the global RM the new master is the job's, on its new machine.
    let mut back_again = Router::new(RouterConfig::default());
    back_again.recover(journal);
    back_again.sanity_check();
    let l = LinkId(9);
    let name = if kept == m0 { "m0" } else { "m1" };
    step(&mut back_again, |r| {
        r.on_link_opened(l, Role::Local { name: name.into() }, Duration::ZERO)
    });
    let msg = ToGlobal::Advertise {
        ad: format!("[ Name = \"{name}\"; Memory = 4000 ]"),
        slots: 1,
        running: vec![*second],
    };
    let out = step(&mut back_again, |r| r.on_message(l, msg, Duration::ZERO));
    assert!(
        !sends(&out)
            .iter()
            .any(|(_, m)| matches!(m, FromGlobal::Kill { .. } | FromGlobal::SpawnMaster { .. })),
        "{out:?}"
    );
}

#[test]
fn a_pinned_master_whose_machine_is_lost_ends_its_job() {
    let mut r = router();
    advertise(&mut r, LinkId(1), "m0", 4000);
    advertise(&mut r, LinkId(2), "m1", 4000);
    let file = "executable = master\nqueue\n";
    submit(&mut r, file, "m1", false);
    let beat = ToGlobal::Heartbeat {
        update: String::new(),
    };
    step(&mut r, |r| {
        r.on_message(LinkId(1), beat, Duration::from_millis(2500))
    });
    let out = step(&mut r, |r| r.on_tick(Duration::from_secs(4)));
    assert!(masters(&out).is_empty(), "{out:?}");
    assert!(
        records(&out)
            .iter()
            .any(|rec| matches!(rec, Record::History(_))),
        "{out:?}"
    );
}

#[test]
fn a_placed_master_gets_its_input_files_by_content_once_uploaded() {
    let mut r = router();
    advertise(&mut r, LinkId(1), "m0", 4000);
    let params = ExecutableRef {
        name: "params.json".into(),
        sha256: "ef".repeat(32),
        size: 3,
    };
    let mut spec = carmi_proto::submit::parse(
        "job.sub",
        "executable = master\ntransfer_input_files = /home/alice/params.json\nqueue\n",
    )
    .unwrap();
    spec.input_refs = vec![params.clone()];
    let msg = |spec: &carmi_proto::submit::JobSpec| {
        ToGlobal::Submit(Box::new(SubmitRequest {
            owner: "alice".into(),
            machine: "laptop".into(),
            executable: exe(),
            spec: spec.clone(),
            submitted_unix: 0,
            anywhere: true,
            procs: Vec::new(),
            max_materialize: None,
            max_idle: None,
        }))
    };
    // Not uploaded: refused, naming the file.
    let out = step(&mut r, |r| r.on_message(ADMIN, msg(&spec), Duration::ZERO));
    assert!(
        matches!(&sends(&out)[..], [(_, FromGlobal::AdminFailed(f))] if f.message.contains("params.json")),
        "{out:?}"
    );
    r.on_executable_stored(&params);
    let out = step(&mut r, |r| r.on_message(ADMIN, msg(&spec), Duration::ZERO));
    let spawn = sends(&out)
        .into_iter()
        .find_map(|(_, m)| match m {
            FromGlobal::SpawnMaster {
                input_files,
                inputs,
                ..
            } => Some((input_files, inputs)),
            _ => None,
        })
        .expect("the master starts");
    // No path of the laptop reaches m0: the file comes from the pool.
    assert_eq!(spawn, (vec![], vec![params]));
}

#[test]
fn a_held_job_whose_master_waited_for_a_machine_is_placed_after_its_release() {
    let mut r = router();
    advertise(&mut r, LinkId(1), "m0", 1000);
    let file =
        "executable = master\nmaster_requirements = Memory >= 2000\nmachine_count = 0..1\nqueue\n";
    submit(&mut r, file, "laptop", true);
    // `step` checks the router's invariants: the unplaced master goes with the hold.
    let hold = ToGlobal::Hold {
        job: JobId(1),
        cluster: false,
        reason: None,
        user: "alice".into(),
    };
    let out = step(&mut r, |r| r.on_message(ADMIN, hold, Duration::ZERO));
    assert!(
        matches!(&sends(&out)[..], [(_, FromGlobal::Held { .. })]),
        "{out:?}"
    );
    let out = advertise(&mut r, LinkId(2), "big", 8000);
    assert!(masters(&out).is_empty(), "held: no master\n{out:?}");
    let release = ToGlobal::Release {
        job: JobId(1),
        cluster: false,
    };
    let out = step(&mut r, |r| r.on_message(ADMIN, release, Duration::ZERO));
    let placed = masters(&out);
    assert_eq!(placed.len(), 1, "{out:?}");
    assert_eq!(placed[0].0, LinkId(2));
}

/// A history record whose master sent back one file of `bytes` bytes.
fn ended(job: u64, bytes: u64) -> carmi_proto::msg::JobRecord {
    carmi_proto::msg::JobRecord {
        job: JobId(job),
        cluster: None,
        proc: 0,
        owner: "alice".into(),
        executable: "master".into(),
        submitted_unix: 0,
        ended_unix: 0,
        end: carmi_proto::msg::JobEnd::Removed,
        files: Some(JobFiles {
            process: ProcessId(1000 + job),
            files: vec![ReturnedFile {
                name: "stdout".into(),
                size: bytes,
                truncated: false,
                dest: "/x".into(),
            }],
        }),
        usage: Default::default(),
    }
}

#[test]
fn returned_files_go_with_their_history_record_and_within_the_store_limit() {
    use carmi_proto::limits::MAX_KEPT_FILES_BYTES;
    let mut h = super::reports::history::History::default();
    // Over the store's limit: the oldest job's files go, its record stays.
    let big = MAX_KEPT_FILES_BYTES / 2;
    assert!(h.push(ended(1, big)).is_empty());
    assert!(h.push(ended(2, big)).is_empty());
    assert_eq!(h.push(ended(3, 1)), [ProcessId(1001)]);
    let kept: Vec<bool> = h.select(None).iter().map(|r| r.files.is_some()).collect();
    assert_eq!(kept, [false, true, true]);
    // Past the history's limit: a forgotten record's files are deleted with it.
    let mut h = super::reports::history::History::default();
    h.push(ended(1, 10));
    for job in 2..=super::HISTORY_LIMIT as u64 {
        let mut r = ended(job, 0);
        r.files = None;
        assert!(h.push(r).is_empty());
    }
    let mut last = ended(1_000_000, 0);
    last.files = None;
    assert_eq!(h.push(last), [ProcessId(1001)]);
}
