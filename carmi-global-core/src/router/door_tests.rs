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
fn a_master_that_cannot_start_ends_its_job_with_the_reason_in_the_history() {
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
    let spec = carmi_proto::submit::parse("j", "executable = master\nqueue\n").unwrap();
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
    let want = carmi_proto::msg::JobRecord {
        job: JobId(1),
        owner: "carol".into(),
        executable: "master".into(),
        submitted_unix: 7,
        ended_unix: 1_005,
        end: carmi_proto::msg::JobEnd::FailedToStart(reason.into()),
        files: None,
        usage: carmi_proto::msg::JobUsage {
            machines: vec!["m0".into()],
            ..Default::default()
        },
    };
    assert_eq!(
        records[..2],
        [
            Record::History(Box::new(want.clone())),
            Record::Ended { job: JobId(1) }
        ]
    );
    journal.extend(records);
    assert!(!r.allocator().has_job(JobId(1)));
    let history = |r: &mut Router, job| {
        let (sends, _) = step(r, |r| {
            r.on_message(ADMIN, ToGlobal::History { job }, Duration::from_secs(6))
        });
        match &sends[..] {
            [(ADMIN, FromGlobal::History(h))] => h.clone(),
            other => panic!("{other:?}"),
        }
    };
    assert_eq!(history(&mut r, None), std::slice::from_ref(&want));
    assert_eq!(history(&mut r, Some(JobId(1))), std::slice::from_ref(&want));
    assert!(history(&mut r, Some(JobId(2))).is_empty());
    // A restarted global RM has it too, from a compacted journal.
    let compacted = journal::Live::of(&journal).records();
    let mut again = Router::new(RouterConfig::default());
    again.recover(compacted);
    step(&mut again, |r| {
        r.on_link_opened(ADMIN, Role::Admin, Duration::ZERO)
    });
    assert_eq!(history(&mut again, None), [want]);
}

#[test]
fn the_history_keeps_the_last_jobs_only() {
    let mut h = crate::router::jobs::History::default();
    for j in 0..crate::router::HISTORY_LIMIT as u64 + 5 {
        h.push(carmi_proto::msg::JobRecord {
            job: JobId(j),
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
    // Ids at the limit are still adopted (a job of an earlier run).
    let max = carmi_proto::limits::MAX_ID;
    let (sends, _) = step(&mut r, |r| {
        r.on_message(m0, attach(2, max, max), Duration::ZERO)
    });
    assert!(
        matches!(&sends[..], [(_, FromGlobal::Attached { job, process, .. })] if job.0 == max && process.0 == max),
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
    });
    let mut r = Router::new(RouterConfig::default());
    r.recover(vec![Record::Submitted {
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
            "arguments (argument 1): 208000 bytes is above the limit of 131071 bytes per argument (Linux's MAX_ARG_STRLEN), once $(Cluster) is expanded to 1000000000000000"
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
