//! What a client sends is checked at the door (limits named in the
//! refusal), and how each job ended is kept for `carmi history`.

use super::*;

pub(super) fn submit_msg(spec: carmi_proto::submit::JobSpec) -> ToGlobal {
    ToGlobal::Submit(Box::new(SubmitRequest {
        owner: "carol".into(),
        machine: "m0".into(),
        executable: exe("master"),
        spec,
        submitted_unix: 7,
        anywhere: false,
        procs: Vec::new(),
        max_materialize: None,
        max_idle: None,
    }))
}

#[test]
fn a_submit_above_a_limit_is_refused_before_anything_is_built() {
    let mut r = Router::new(RouterConfig::default());
    advertise(&mut r, LinkId(1), "m0", vec![]);
    r.on_executable_stored(&exe("master"));
    step(&mut r, |r| {
        r.on_link_opened(ADMIN, Role::Admin, Duration::ZERO)
    });
    // A client that skips the parser's checks.
    let mut spec = carmi_proto::submit::parse("j", "executable = master\nqueue\n").unwrap();
    spec.classes[0].min = u32::MAX;
    spec.classes[0].max = u32::MAX;
    let (sends, records) = step(&mut r, |r| {
        r.on_message(ADMIN, submit_msg(spec), Duration::ZERO)
    });
    assert!(records.is_empty(), "{records:?}");
    match &sends[..] {
        [(ADMIN, FromGlobal::AdminFailed(f))] => assert_eq!(
            f.message,
            "class `class0`: machine_count: 4294967295 is above the limit of 100000 machines per class"
        ),
        other => panic!("{other:?}"),
    }
    assert!(!r.allocator().has_job(JobId(1)));
    // Still serving.
    let (sends, _) = step(&mut r, |r| {
        r.on_message(ADMIN, ToGlobal::Status, Duration::ZERO)
    });
    assert!(
        matches!(sends[..], [(ADMIN, FromGlobal::Pool(_))]),
        "{sends:?}"
    );
}

#[test]
fn a_minimum_the_pool_cannot_supply_waits_flagged_in_the_queue() {
    let mut r = Router::new(RouterConfig::default());
    advertise(&mut r, LinkId(1), "m0", vec![]);
    r.on_executable_stored(&exe("master"));
    step(&mut r, |r| {
        r.on_link_opened(ADMIN, Role::Admin, Duration::ZERO)
    });
    let spec =
        carmi_proto::submit::parse("j", "executable = master\nmachine_count = 100000\nqueue\n")
            .unwrap();
    let (sends, _) = step(&mut r, |r| {
        r.on_message(ADMIN, submit_msg(spec), Duration::ZERO)
    });
    assert_eq!(sends, [(ADMIN, FromGlobal::Submitted { job: JobId(1) })]);
    let (sends, _) = step(&mut r, |r| {
        r.on_message(ADMIN, ToGlobal::Queue, Duration::ZERO)
    });
    let [(ADMIN, FromGlobal::Queue(jobs))] = &sends[..] else {
        panic!("{sends:?}");
    };
    assert_eq!(jobs[0].state, "waiting");
    assert_eq!(
        jobs[0].note.as_deref(),
        Some("cannot start: needs 100000 machines at once; the pool has 2 slots online")
    );
}

/// `on_impossible = reject` refuses a job whose class the pool cannot
/// meet (three X86_64 machines; the pool has two slots of them, and two
/// AARCH64 ones) with the
/// reason, accepting nothing; `hold` accepts it held with that reason, and
/// the job behind it starts on the machines it named.
#[test]
fn on_impossible_rejects_or_holds_a_job_the_pool_cannot_start() {
    let mut r = Router::new(RouterConfig::default());
    advertise(&mut r, LinkId(1), "m0", vec![]);
    // Two more slots, of another kind.
    let arm = LinkId(2);
    step(&mut r, |r| {
        r.on_link_opened(
            arm,
            Role::Local {
                name: "arm0".into(),
            },
            Duration::ZERO,
        )
    });
    let ad = ToGlobal::Advertise {
        ad: "[ Name = \"arm0\"; Arch = \"AARCH64\" ]".into(),
        slots: 2,
        running: vec![],
    };
    step(&mut r, |r| r.on_message(arm, ad, Duration::ZERO));
    r.on_executable_stored(&exe("master"));
    step(&mut r, |r| {
        r.on_link_opened(ADMIN, Role::Admin, Duration::ZERO)
    });
    let file = |choice: &str| {
        carmi_proto::submit::parse(
            "j",
            &format!(
                "executable = master\non_impossible = {choice}\nrequirements = Arch == \"X86_64\"\nmachine_count = 3\nqueue\n"
            ),
        )
        .unwrap()
    };
    let (sends, records) = step(&mut r, |r| {
        r.on_message(ADMIN, submit_msg(file("reject")), Duration::ZERO)
    });
    assert!(records.is_empty(), "{records:?}");
    match &sends[..] {
        [(ADMIN, FromGlobal::AdminFailed(f))] => assert_eq!(
            f.message,
            "cannot start: class class0 needs 3, the pool has 2 matching (on_impossible = reject)"
        ),
        other => panic!("{other:?}"),
    }
    assert!(!r.allocator().has_job(JobId(1)));
    let (sends, records) = step(&mut r, |r| {
        r.on_message(ADMIN, submit_msg(file("hold")), Duration::ZERO)
    });
    assert_eq!(sends, [(ADMIN, FromGlobal::Submitted { job: JobId(1) })]);
    let reason =
        "cannot start: class class0 needs 3, the pool has 2 matching (on_impossible = hold)";
    assert!(
        records.contains(&Record::Held {
            job: JobId(1),
            reason: reason.into()
        }),
        "{records:?}"
    );
    assert!(r.allocator().is_held(JobId(1)));
    // `wait` (the default) accepts it waiting, flagged, keeping nothing back.
    step(&mut r, |r| {
        r.on_message(ADMIN, submit_msg(file("wait")), Duration::ZERO)
    });
    let small = carmi_proto::submit::parse(
        "j",
        "executable = master\nrequirements = Arch == \"X86_64\"\nqueue\n",
    )
    .unwrap();
    step(&mut r, |r| {
        r.on_message(ADMIN, submit_msg(small), Duration::ZERO)
    });
    let (sends, _) = step(&mut r, |r| {
        r.on_message(ADMIN, ToGlobal::Queue, Duration::ZERO)
    });
    let [(ADMIN, FromGlobal::Queue(jobs))] = &sends[..] else {
        panic!("{sends:?}");
    };
    let shown: Vec<(&str, Option<&str>)> = jobs
        .iter()
        .map(|j| (j.state.as_str(), j.note.as_deref()))
        .collect();
    assert_eq!(
        shown,
        [
            ("held", Some(reason)),
            (
                "waiting",
                Some("cannot start: class class0 needs 3, the pool has 2 matching")
            ),
            ("running", None),
        ]
    );
}

#[test]
fn a_master_that_cannot_start_holds_its_job_with_the_reason_across_a_restart() {
    let mut r = Router::new(RouterConfig {
        started_unix: 1_000,
        ..RouterConfig::default()
    });
    let mut journal = Vec::new();
    let m0 = LinkId(1);
    journal.extend(advertise(&mut r, m0, "m0", vec![]).1);
    r.on_executable_stored(&exe("master"));
    step(&mut r, |r| {
        r.on_link_opened(ADMIN, Role::Admin, Duration::ZERO)
    });
    let file = "executable = master\nmax_start_failures = 1\nqueue\n";
    let spec = carmi_proto::submit::parse("j", file).unwrap();
    let (sends, records) = step(&mut r, |r| {
        r.on_message(ADMIN, submit_msg(spec), Duration::ZERO)
    });
    journal.extend(records);
    let Some(FromGlobal::SpawnMaster { process, .. }) = sends.get(1).map(|s| s.1.clone()) else {
        panic!("{sends:?}");
    };
    let reason = "cannot execute master: Exec format error (os error 8)";
    let started = ToGlobal::Started {
        process,
        result: Err(reason.into()),
    };
    let (_, records) = step(&mut r, |r| {
        r.on_message(m0, started, Duration::from_secs(5))
    });
    // Held, not ended: nothing in the history, the reason in the queue.
    assert!(
        !records.iter().any(|rec| matches!(rec, Record::History(_))),
        "{records:?}"
    );
    journal.extend(records);
    let held_note = |r: &mut Router| {
        let (sends, _) = step(r, |r| {
            r.on_message(ADMIN, ToGlobal::Queue, Duration::from_secs(6))
        });
        match &sends[..] {
            [(ADMIN, FromGlobal::Queue(q))] if q.len() == 1 && q[0].state == "held" => {
                q[0].note.clone().unwrap_or_default()
            }
            other => panic!("{other:?}"),
        }
    };
    let note = held_note(&mut r);
    assert!(
        note.contains(reason) && note.contains("max_start_failures = 1"),
        "{note}"
    );
    // A restarted global RM has it held too, from a compacted journal.
    let compacted = journal::Live::of(&journal).records();
    let mut again = Router::new(RouterConfig::default());
    again.recover(compacted);
    step(&mut again, |r| {
        r.on_link_opened(ADMIN, Role::Admin, Duration::ZERO)
    });
    assert_eq!(held_note(&mut again), note);
}

#[test]
fn the_history_keeps_the_last_jobs_only() {
    let mut h = crate::router::reports::history::History::default();
    for j in 0..crate::router::HISTORY_LIMIT as u64 + 5 {
        h.push(carmi_proto::msg::JobRecord {
            job: JobId(j),
            cluster: None,
            proc: 0,
            owner: String::new(),
            executable: String::new(),
            submitted_unix: 0,
            ended_unix: 0,
            end: carmi_proto::msg::JobEnd::Removed,
            files: None,
            usage: Default::default(),
        });
    }
    let all = h.select(None);
    assert_eq!(all.len(), crate::router::HISTORY_LIMIT);
    assert_eq!(all[0].job, JobId(5));
    let live = journal::Live::of(
        &all.into_iter()
            .chain(std::iter::once(carmi_proto::msg::JobRecord {
                job: JobId(99_999),
                cluster: None,
                proc: 0,
                owner: String::new(),
                executable: String::new(),
                submitted_unix: 0,
                ended_unix: 0,
                end: carmi_proto::msg::JobEnd::Removed,
                files: None,
                usage: Default::default(),
            }))
            .map(|r| Record::History(Box::new(r)))
            .collect::<Vec<_>>(),
    );
    assert_eq!(live.len(), 1 + crate::router::HISTORY_LIMIT);
}

#[test]
fn an_attach_naming_ids_near_the_end_of_the_counters_gets_fresh_ones() {
    let mut r = Router::new(RouterConfig::default());
    let m0 = LinkId(1);
    advertise(&mut r, m0, "m0", vec![]);
    let attach = |conn, job: u64, process: u64| ToGlobal::AppAttach {
        conn: ConnId(conn),
        job: Some(JobId(job)),
        process: Some(ProcessId(process)),
        endpoint: "127.0.0.1:1".into(),
        token: None,
    };
    // Before the limit, this moved the job counter to u64::MAX + 1 (a
    // panic, or 0 in a release build: every later id taken).
    let (sends, _) = step(&mut r, |r| {
        r.on_message(m0, attach(1, u64::MAX, u64::MAX), Duration::ZERO)
    });
    let (job, process) = match &sends[..] {
        [(_, FromGlobal::Attached { job, process, .. })] => (*job, *process),
        other => panic!("{other:?}"),
    };
    assert_eq!((job, process), (JobId(1), ProcessId(1)));
    // Ids at the limit are no job this global RM gave: not adopted (its
    // journal holds every job it gave), the application is told.
    let max = carmi_proto::limits::MAX_ID;
    let (sends, _) = step(&mut r, |r| {
        r.on_message(m0, attach(2, max, max), Duration::ZERO)
    });
    assert!(
        matches!(&sends[..], [(_, FromGlobal::JobGone { job, .. })] if job.0 == max),
        "{sends:?}"
    );
    // The job counter did not move: the next new job is job 2.
    let new = ToGlobal::AppAttach {
        conn: ConnId(3),
        job: None,
        process: None,
        endpoint: "127.0.0.1:1".into(),
        token: None,
    };
    let (sends, _) = step(&mut r, |r| r.on_message(m0, new, Duration::ZERO));
    assert!(
        matches!(
            &sends[..],
            [(_, FromGlobal::Attached { job: JobId(2), .. })]
        ),
        "{sends:?}"
    );
}

#[test]
fn a_machine_outside_a_job_may_not_join_it_and_one_inside_may() {
    let mut r = Router::new(RouterConfig::default());
    let (m0, m1) = (LinkId(1), LinkId(2));
    advertise(&mut r, m0, "m0", vec![]);
    advertise(&mut r, m1, "m1", vec![]);
    let attach = |conn, job: Option<u64>| ToGlobal::AppAttach {
        conn: ConnId(conn),
        job: job.map(JobId),
        process: None,
        endpoint: "127.0.0.1:1".into(),
        token: None,
    };
    // Alice's job starts by hand on m0.
    let (sends, _) = step(&mut r, |r| {
        r.on_message(m0, attach(1, None), Duration::ZERO)
    });
    let job = match &sends[..] {
        [(_, FromGlobal::Attached { job, .. })] => *job,
        other => panic!("{other:?}"),
    };
    // m1's owner, with m1's own link, names her job: refused, no credential
    // (the driver sends one only before `Attached`).
    let (sends, _) = step(&mut r, |r| {
        r.on_message(m1, attach(1, Some(job.0)), Duration::ZERO)
    });
    match &sends[..] {
        [(l, FromGlobal::AttachRefused { reason, .. })] => {
            assert_eq!(*l, m1);
            assert!(reason.contains("may not join"), "{reason}");
        }
        other => panic!("{other:?}"),
    }
    // A second application of the job on m0 joins it.
    let (sends, _) = step(&mut r, |r| {
        r.on_message(m0, attach(2, Some(job.0)), Duration::ZERO)
    });
    assert!(
        matches!(&sends[..], [(_, FromGlobal::Attached { job: j, .. })] if *j == job),
        "{sends:?}"
    );
}

#[test]
fn a_machine_name_above_the_limit_is_refused_with_the_limit() {
    let mut r = Router::new(RouterConfig::default());
    let name = "m".repeat(300);
    r.on_link_opened(LinkId(1), Role::Local { name }, Duration::ZERO);
    match &r.take_outputs()[..] {
        [Output::Close { link, reason }] => {
            assert_eq!(*link, LinkId(1));
            assert_eq!(
                reason,
                "machine name: 300 bytes is above the limit of 255 bytes"
            );
        }
        other => panic!("{other:?}"),
    }
    r.sanity_check();
}

#[test]
fn a_journaled_job_above_a_limit_is_dropped_on_replay() {
    let mut spec = carmi_proto::submit::parse("j", "executable = master\nqueue\n").unwrap();
    spec.arguments = vec!["x".repeat(carmi_proto::limits::MAX_ARG_BYTES + 1)];
    let request = Box::new(SubmitRequest {
        owner: "old".into(),
        machine: "m0".into(),
        executable: exe("master"),
        spec,
        submitted_unix: 0,
        anywhere: false,
        procs: Vec::new(),
        max_materialize: None,
        max_idle: None,
    });
    let mut r = Router::new(RouterConfig::default());
    r.recover(vec![Record::Submitted {
        cluster: None,
        job: JobId(4),
        request,
    }]);
    assert!(!r.allocator().has_job(JobId(4)));
    r.sanity_check();
}

#[test]
fn arguments_that_outgrow_the_limit_once_the_job_id_is_expanded_are_refused() {
    let mut r = Router::new(RouterConfig::default());
    // A long-lived pool: job ids of 16 digits.
    r.recover(vec![Record::Counters {
        next_job: 1_000_000_000_000_000,
        next_process: 1,
    }]);
    advertise(&mut r, LinkId(1), "m0", vec![]);
    r.on_executable_stored(&exe("master"));
    step(&mut r, |r| {
        r.on_link_opened(ADMIN, Role::Admin, Duration::ZERO)
    });
    // 130,000 bytes as written: within the limit; 208,000 once expanded.
    let text = format!(
        "executable = master\narguments = {}\nqueue\n",
        "$(Cluster)".repeat(13_000)
    );
    let spec = carmi_proto::submit::parse("j", &text).unwrap();
    let (sends, records) = step(&mut r, |r| {
        r.on_message(ADMIN, submit_msg(spec), Duration::ZERO)
    });
    assert!(records.is_empty(), "{records:?}");
    match &sends[..] {
        [(ADMIN, FromGlobal::AdminFailed(f))] => assert_eq!(
            f.message,
            "arguments (argument 1): 208000 bytes is above the limit of 131071 bytes per argument (Linux's MAX_ARG_STRLEN), once $(ClusterId) is expanded to 1000000000000000"
        ),
        other => panic!("{other:?}"),
    }
}

#[test]
fn a_forwarded_request_above_a_limit_is_failed_naming_it() {
    let mut r = Router::new(RouterConfig::default());
    let m0 = LinkId(1);
    advertise(&mut r, m0, "m0", vec![]);
    let attach = ToGlobal::AppAttach {
        conn: ConnId(3),
        job: None,
        process: None,
        endpoint: "127.0.0.1:1".into(),
        token: None,
    };
    step(&mut r, |r| r.on_message(m0, attach, Duration::ZERO));
    let forward = |id, body| ToGlobal::Forward {
        conn: ConnId(3),
        id: RequestId(id),
        body,
    };
    let define = Request::DefineClass {
        name: "w".into(),
        expression: "true".into(),
        rank: None,
        replace: false,
    };
    step(&mut r, |r| {
        r.on_message(m0, forward(1, define), Duration::ZERO)
    });
    let add = Request::AddHosts {
        class: "w".into(),
        count: u32::MAX,
        increment: 1,
    };
    let (sends, _) = step(&mut r, |r| {
        r.on_message(m0, forward(2, add), Duration::ZERO)
    });
    match &sends[..] {
        [
            (
                _,
                FromGlobal::Deliver {
                    event: carmi_proto::msg::Event::Failed { request, failure },
                    ..
                },
            ),
        ] => {
            assert_eq!(*request, RequestId(2));
            assert_eq!(
                failure.message,
                "AddHosts count: 4294967295 is above the limit of 100000 machines per class"
            );
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(r.allocator().pending_requests(), 0);
}
