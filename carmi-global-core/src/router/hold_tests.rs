//! `carmi hold` / `carmi release` and the job's event log at the router:
//! what is killed, what goes back, what the journal keeps across a restart.

use std::time::Duration;

use carmi_proto::events::EventKind;
use carmi_proto::ids::{ConnId, JobId, ProcessId, RequestId};
use carmi_proto::msg::{
    ExecutableRef, ExitStatus, FromGlobal, JobEnd, Request, Role, SpawnTarget, SubmitRequest,
    ToGlobal,
};

use super::hand_tests::step;
use super::{LinkId, Router, RouterConfig};
use crate::journal::{Live, Record};

const ADMIN: LinkId = LinkId(100);
const M0: LinkId = LinkId(1);
const T: Duration = Duration::ZERO;

fn exe(name: &str) -> ExecutableRef {
    ExecutableRef {
        name: name.into(),
        sha256: "cd".repeat(32),
        size: 10,
    }
}

fn msg(r: &mut Router, link: LinkId, m: ToGlobal) -> (Vec<(LinkId, FromGlobal)>, Vec<Record>) {
    step(r, |r| r.on_message(link, m, T))
}

/// A router with machine m0 (two slots) and an admin link; the journal so far.
fn pool() -> (Router, Vec<Record>) {
    let mut r = Router::new(RouterConfig::default());
    let mut journal = Vec::new();
    step(&mut r, |r| {
        r.on_link_opened(M0, Role::Local { name: "m0".into() }, T)
    });
    let ad = ToGlobal::Advertise {
        ad: "[ Name = \"m0\"; Arch = \"X86_64\" ]".into(),
        slots: 2,
        running: vec![],
    };
    journal.extend(msg(&mut r, M0, ad).1);
    r.on_executable_stored(&exe("master"));
    r.on_executable_stored(&exe("worker"));
    step(&mut r, |r| r.on_link_opened(ADMIN, Role::Admin, T));
    (r, journal)
}

fn submit(r: &mut Router, journal: &mut Vec<Record>) -> Option<ProcessId> {
    let spec =
        carmi_proto::submit::parse("j", "executable = master\nmachine_count = 2..2\nqueue\n")
            .unwrap();
    let req = ToGlobal::Submit(Box::new(SubmitRequest {
        owner: "alice".into(),
        machine: "m0".into(),
        executable: exe("master"),
        spec,
        submitted_unix: 5,
        anywhere: false,
        procs: Vec::new(),
        max_materialize: None,
        max_idle: None,
    }));
    let (sends, records) = msg(r, ADMIN, req);
    journal.extend(records);
    sends.iter().find_map(|(_, m)| match m {
        FromGlobal::SpawnMaster { process, .. } => Some(*process),
        _ => None,
    })
}

fn queue_state(r: &mut Router) -> (String, Option<String>, u32) {
    match &msg(r, ADMIN, ToGlobal::Queue).0[..] {
        [(_, FromGlobal::Queue(q))] => (
            q[0].state.clone(),
            q[0].note.clone(),
            q[0].classes.iter().map(|c| c.held).sum(),
        ),
        other => panic!("{other:?}"),
    }
}

fn idle_slots(r: &Router) -> usize {
    r.allocator().slot_counts().1
}

fn events(r: &mut Router, job: JobId) -> Vec<String> {
    match &msg(r, ADMIN, ToGlobal::Events { job, after: 0 }).0[..] {
        [(_, FromGlobal::Events { events, .. })] => {
            events.iter().map(|e| e.kind.word().to_string()).collect()
        }
        other => panic!("{other:?}"),
    }
}

fn hold(job: u64) -> ToGlobal {
    ToGlobal::Hold {
        job: JobId(job),
        cluster: false,
        reason: None,
        user: "bob".into(),
    }
}

#[test]
fn a_held_job_gives_everything_back_and_a_released_one_starts_afresh() {
    let (mut r, mut journal) = pool();
    let master = submit(&mut r, &mut journal).expect("the job starts at once");
    let started = ToGlobal::Started {
        process: master,
        result: Ok(()),
    };
    msg(&mut r, M0, started);
    // The master attaches and spawns a worker on one of its hosts.
    let attach = ToGlobal::AppAttach {
        conn: ConnId(9),
        job: Some(JobId(1)),
        process: Some(master),
        endpoint: "127.0.0.1:1".into(),
        token: None,
    };
    msg(&mut r, M0, attach);
    let host = r.allocator().job_hosts(JobId(1))[0];
    let spawn = ToGlobal::Forward {
        conn: ConnId(9),
        id: RequestId(1),
        body: Request::ClassSpawn {
            executable: exe("worker"),
            args: vec![],
            target: SpawnTarget::Host(host),
            output: Default::default(),
        },
    };
    let worker = msg(&mut r, M0, spawn)
        .0
        .iter()
        .find_map(|(_, m)| match m {
            FromGlobal::Spawn { process, .. } => Some(*process),
            _ => None,
        })
        .expect("the worker is spawned");
    assert_eq!(idle_slots(&r), 0);

    let (sends, records) = msg(&mut r, ADMIN, hold(1));
    journal.extend(records.clone());
    assert!(
        matches!(&records[..], [Record::Held { job: JobId(1), reason }, Record::Events(_)] if reason == "held by bob"),
        "{records:?}"
    );
    // Master and worker are killed, the answer is given, both slots are idle.
    let killed: Vec<ProcessId> = sends
        .iter()
        .filter_map(|(l, m)| match m {
            FromGlobal::Kill { process } if *l == M0 => Some(*process),
            _ => None,
        })
        .collect();
    assert!(
        killed.contains(&master) && killed.contains(&worker),
        "{sends:?}"
    );
    assert!(sends.contains(&(ADMIN, FromGlobal::Held { job: JobId(1) })));
    assert_eq!(idle_slots(&r), 2);
    assert_eq!(
        queue_state(&mut r),
        ("held".into(), Some("held by bob".into()), 0)
    );
    // Late reports of the killed processes change nothing.
    let exited = ToGlobal::Exited {
        process: master,
        status: ExitStatus::Signal(15),
        cpu_seconds: 0.0,
        usage: Default::default(),
    };
    let (_, records) = msg(&mut r, M0, exited);
    assert!(records.is_empty(), "{records:?}");
    assert_eq!(queue_state(&mut r).0, "held");

    // Holding twice, or releasing a job that is not held, is refused.
    let again = msg(&mut r, ADMIN, hold(1)).0;
    assert!(
        matches!(&again[..], [(_, FromGlobal::AdminFailed(f))] if f.message.contains("held already")),
        "{again:?}"
    );

    // Across a restart (the journal as written, and compacted), it stays held.
    for replay in [journal.clone(), Live::of(&journal).records()] {
        let mut back = Router::new(RouterConfig::default());
        back.recover(replay);
        back.sanity_check();
        assert!(back.allocator().is_held(JobId(1)));
        assert!(back.processes().of_job(JobId(1)).is_empty());
    }

    // Released: a fresh master with a new process id.
    let (sends, records) = msg(
        &mut r,
        ADMIN,
        ToGlobal::Release {
            job: JobId(1),
            cluster: false,
        },
    );
    assert!(
        matches!(records[0], Record::Released { job: JobId(1) }),
        "{records:?}"
    );
    // Its two hosts are journaled before the master is sent.
    assert!(
        matches!(
            &records[1..3],
            [
                Record::Claimed { job: JobId(1), .. },
                Record::Claimed { job: JobId(1), .. }
            ]
        ),
        "{records:?}"
    );
    assert!(
        matches!(records[3], Record::Started { job: JobId(1), .. }),
        "{records:?}"
    );
    let fresh = sends
        .iter()
        .find_map(|(_, m)| match m {
            FromGlobal::SpawnMaster { process, .. } => Some(*process),
            _ => None,
        })
        .expect("the released job starts again");
    assert_ne!(fresh, master);
    assert_eq!(queue_state(&mut r).0, "running");
    let not_held = msg(
        &mut r,
        ADMIN,
        ToGlobal::Release {
            job: JobId(1),
            cluster: false,
        },
    )
    .0;
    assert!(
        matches!(&not_held[..], [(_, FromGlobal::AdminFailed(f))] if f.message.contains("is not held")),
        "{not_held:?}"
    );
    assert_eq!(
        events(&mut r, JobId(1)),
        [
            "submitted",
            "host-added",
            "host-added",
            "master-started",
            "held",
            "released",
            "host-added",
            "host-added"
        ]
    );
}

#[test]
fn a_waiting_job_held_keeps_its_place_in_the_queue() {
    let (mut r, mut journal) = pool();
    submit(&mut r, &mut journal).expect("job 1 starts");
    assert!(submit(&mut r, &mut journal).is_none(), "job 2 waits");
    assert!(submit(&mut r, &mut journal).is_none(), "job 3 waits");
    msg(&mut r, ADMIN, hold(2));
    assert!(r.allocator().is_held(JobId(2)));
    // Job 3 waits behind the held job 2 no longer: it is now first in line...
    assert_eq!(r.allocator().queued_ahead(JobId(3)), Some(0));
    // ...until job 2 is released, which files it ahead of job 3 again.
    msg(
        &mut r,
        ADMIN,
        ToGlobal::Release {
            job: JobId(2),
            cluster: false,
        },
    );
    assert_eq!(r.allocator().queued_ahead(JobId(2)), Some(0));
    assert_eq!(r.allocator().queued_ahead(JobId(3)), Some(1));
    // A held job can be removed, and its log says how it ended.
    msg(&mut r, ADMIN, hold(3));
    msg(
        &mut r,
        ADMIN,
        ToGlobal::RemoveJob {
            job: JobId(3),
            cluster: false,
        },
    );
    let (sends, _) = msg(
        &mut r,
        ADMIN,
        ToGlobal::Events {
            job: JobId(3),
            after: 1,
        },
    );
    match &sends[..] {
        [(_, FromGlobal::Events { events, ended, .. })] => {
            assert!(*ended);
            let kinds: Vec<_> = events.iter().map(|e| (e.seq, e.kind.clone())).collect();
            assert_eq!(
                kinds,
                [
                    (
                        2,
                        EventKind::Held {
                            reason: "held by bob".into()
                        }
                    ),
                    (
                        3,
                        EventKind::Ended {
                            end: JobEnd::Removed
                        }
                    )
                ]
            );
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn a_job_not_in_the_queue_cannot_be_held_and_has_no_events() {
    let (mut r, _) = pool();
    for m in [
        hold(7),
        ToGlobal::Events {
            job: JobId(7),
            after: 0,
        },
    ] {
        let sends = msg(&mut r, ADMIN, m).0;
        assert!(
            matches!(&sends[..], [(_, FromGlobal::AdminFailed(f))] if f.message.contains("job 7")),
            "{sends:?}"
        );
    }
}

fn all_events(r: &mut Router, job: JobId) -> Vec<carmi_proto::events::JobEvent> {
    match msg(r, ADMIN, ToGlobal::Events { job, after: 0 }).0.pop() {
        Some((_, FromGlobal::Events { events, .. })) => events,
        other => panic!("{other:?}"),
    }
}

#[test]
fn event_logs_survive_a_restart_and_numbering_goes_on() {
    let (mut r, mut journal) = pool();
    submit(&mut r, &mut journal).expect("job 1 starts");
    assert!(submit(&mut r, &mut journal).is_none(), "job 2 waits");
    let (_, records) = msg(
        &mut r,
        ADMIN,
        ToGlobal::RemoveJob {
            job: JobId(1),
            cluster: false,
        },
    );
    journal.extend(records);
    // Job 2 started on the freed slots; hold it.
    let (_, records) = msg(&mut r, ADMIN, hold(2));
    journal.extend(records);
    let (one, two) = (all_events(&mut r, JobId(1)), all_events(&mut r, JobId(2)));
    assert_eq!(one.last().unwrap().kind.word(), "ended");
    assert_eq!(two.last().unwrap().kind.word(), "held");
    for replay in [journal.clone(), Live::of(&journal).records()] {
        let mut back = Router::new(RouterConfig::default());
        back.recover(replay);
        step(&mut back, |r| r.on_link_opened(ADMIN, Role::Admin, T));
        assert_eq!(all_events(&mut back, JobId(1)), one);
        assert_eq!(all_events(&mut back, JobId(2)), two);
        // The next event of job 2 follows its last number.
        msg(
            &mut back,
            ADMIN,
            ToGlobal::Release {
                job: JobId(2),
                cluster: false,
            },
        );
        let after = all_events(&mut back, JobId(2));
        assert_eq!(after.last().unwrap().seq, two.last().unwrap().seq + 1);
    }
}

#[test]
fn an_owners_comings_and_goings_are_in_the_jobs_events() {
    use carmi_proto::msg::SlotActivity;
    let (mut r, mut journal) = pool();
    let master = submit(&mut r, &mut journal).expect("the job starts");
    let started = ToGlobal::Started {
        process: master,
        result: Ok(()),
    };
    msg(&mut r, M0, started);
    for state in [
        SlotActivity::Suspended,
        SlotActivity::Available,
        SlotActivity::Suspended,
        SlotActivity::Vacated,
    ] {
        msg(&mut r, M0, ToGlobal::SlotState { slot: 1, state });
    }
    let events = all_events(&mut r, JobId(1));
    let lines: Vec<String> = events.iter().skip(4).map(|e| e.kind.to_string()).collect();
    assert_eq!(
        lines,
        [
            "host-suspended h2 m0",
            "host-resumed h2 m0",
            "host-suspended h2 m0",
            "host-lost h2 m0 the owner of h2 reclaimed it"
        ]
    );
}

#[test]
fn a_held_job_whose_master_waited_for_a_machine_waits_no_more() {
    let mut r = Router::new(RouterConfig::default());
    r.on_executable_stored(&exe("master"));
    step(&mut r, |r| r.on_link_opened(ADMIN, Role::Admin, T));
    step(&mut r, |r| {
        r.on_link_opened(M0, Role::Local { name: "m0".into() }, T)
    });
    let ad = ToGlobal::Advertise {
        ad: "[ Name = \"m0\"; Memory = 1000 ]".into(),
        slots: 1,
        running: vec![],
    };
    msg(&mut r, M0, ad);
    let file =
        "executable = master\nmaster_requirements = Memory >= 2000\nmachine_count = 0..1\nqueue\n";
    let req = ToGlobal::Submit(Box::new(SubmitRequest {
        owner: "alice".into(),
        machine: "laptop".into(),
        executable: exe("master"),
        spec: carmi_proto::submit::parse("job.sub", file).unwrap(),
        submitted_unix: 0,
        anywhere: true,
        procs: Vec::new(),
        max_materialize: None,
        max_idle: None,
    }));
    msg(&mut r, ADMIN, req);
    // Its master waits for a machine with the memory; the job is held
    // (`step` checks that no unplaced master is left behind).
    msg(&mut r, ADMIN, hold(1));
    let big = LinkId(2);
    step(&mut r, |r| {
        r.on_link_opened(big, Role::Local { name: "big".into() }, T)
    });
    let ad = ToGlobal::Advertise {
        ad: "[ Name = \"big\"; Memory = 8000 ]".into(),
        slots: 1,
        running: vec![],
    };
    let (sends, _) = msg(&mut r, big, ad);
    assert!(
        !sends
            .iter()
            .any(|(_, m)| matches!(m, FromGlobal::SpawnMaster { .. })),
        "{sends:?}"
    );
    // Released, it starts again, and its new master goes to `big`.
    let (sends, _) = msg(
        &mut r,
        ADMIN,
        ToGlobal::Release {
            job: JobId(1),
            cluster: false,
        },
    );
    assert!(
        sends
            .iter()
            .any(|(l, m)| *l == big && matches!(m, FromGlobal::SpawnMaster { .. })),
        "{sends:?}"
    );
}

/// Issue 15 item 3: the queue's order survives a restart (the journal as
/// written, and compacted): waiting jobs keep their places, and the first
/// of them starts when the running job leaves.
#[test]
fn the_queue_order_survives_a_restart() {
    let (mut r, mut journal) = pool();
    submit(&mut r, &mut journal).expect("job 1 starts");
    for _ in 2..=4 {
        assert!(submit(&mut r, &mut journal).is_none(), "the others wait");
    }
    let ahead = |r: &Router| -> Vec<Option<u32>> {
        (2..=4)
            .map(|j| r.allocator().queued_ahead(JobId(j)))
            .collect()
    };
    let before = ahead(&r);
    assert_eq!(before, [Some(0), Some(1), Some(2)]);
    for replay in [journal.clone(), Live::of(&journal).records()] {
        let mut back = Router::new(RouterConfig::default());
        back.recover(replay);
        assert_eq!(ahead(&back), before);
        step(&mut back, |r| {
            r.on_link_opened(M0, Role::Local { name: "m0".into() }, T)
        });
        let ad = ToGlobal::Advertise {
            ad: "[ Name = \"m0\"; Arch = \"X86_64\" ]".into(),
            slots: 2,
            running: vec![],
        };
        msg(&mut back, M0, ad);
        step(&mut back, |r| r.on_link_opened(ADMIN, Role::Admin, T));
        let (sends, records) = msg(
            &mut back,
            ADMIN,
            ToGlobal::RemoveJob {
                job: JobId(1),
                cluster: false,
            },
        );
        assert!(
            records
                .iter()
                .any(|rec| matches!(rec, Record::Started { job: JobId(2), .. })),
            "job 2 is next: {records:?} {sends:?}"
        );
        assert_eq!(
            (2..=4)
                .map(|j| back.allocator().queued_ahead(JobId(j)))
                .collect::<Vec<_>>(),
            [None, Some(0), Some(1)]
        );
    }
}
