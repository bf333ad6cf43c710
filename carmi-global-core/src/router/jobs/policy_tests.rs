//! A job's `periodic_*` and `on_exit_*` expressions at the router, with
//! virtual time: what each decides, what is journaled, and that a restart
//! replays the decision rather than taking it again.

use std::time::Duration;

use carmi_proto::events::EventKind;
use carmi_proto::ids::{JobId, ProcessId};
use carmi_proto::msg::{
    ExecutableRef, ExitStatus, FromGlobal, JobEnd, Role, SubmitRequest, ToGlobal,
};

use crate::journal::{Live, Record};
use crate::router::{LinkId, Output, Router, RouterConfig};

const ADMIN: LinkId = LinkId(100);
const M: LinkId = LinkId(1);
/// The wall clock at the router's start, and the job's submit time: far
/// from the system's clock, so that a `time()` reading it would show.
const EPOCH: u64 = 1_000_000_000;

fn exe() -> ExecutableRef {
    ExecutableRef {
        name: "master".into(),
        sha256: "cd".repeat(32),
        size: 10,
    }
}

struct Pool {
    r: Router,
    journal: Vec<Record>,
}

impl Pool {
    /// A router whose clock reads `EPOCH` at its start, with machine `a`
    /// (needing no heartbeat within a test) and an admin link.
    fn new() -> Pool {
        Pool::recovered(Vec::new())
    }

    /// [`Pool::new`] after a restart: `journal` replayed first.
    fn recovered(journal: Vec<Record>) -> Pool {
        let config = RouterConfig {
            heartbeat: Duration::from_secs(3600),
            started_unix: EPOCH,
            ..RouterConfig::default()
        };
        let mut pool = Pool {
            r: Router::new(config),
            journal: Vec::new(),
        };
        pool.r.recover(journal);
        pool.r.on_executable_stored(&exe());
        pool.step(0, |r, now| r.on_link_opened(ADMIN, Role::Admin, now));
        let local = Role::Local { name: "a".into() };
        pool.step(0, |r, now| r.on_link_opened(M, local, now));
        let ad = ToGlobal::Advertise {
            ad: "[ Name = \"a\"; State = \"Unclaimed\"; Activity = \"Idle\"; Start = true ]".into(),
            slots: 2,
            running: vec![],
        };
        pool.step(0, |r, now| r.on_message(M, ad, now));
        pool
    }

    /// Runs `f` at second `at`; what it sent, the journal kept.
    fn step(&mut self, at: u64, f: impl FnOnce(&mut Router, Duration)) -> Vec<FromGlobal> {
        f(&mut self.r, Duration::from_secs(at));
        self.r.sanity_check();
        let mut sent = Vec::new();
        for o in self.r.take_outputs() {
            match o {
                Output::Journal(rec) => self.journal.push(rec),
                Output::Send { msg, .. } => sent.push(msg),
                _ => {}
            }
        }
        sent
    }

    /// Submits `lines` (after `executable = master`) at second 0; the
    /// master that went out.
    fn submit(&mut self, lines: &str) -> ProcessId {
        let file = format!("executable = master\n{lines}\nqueue\n");
        let spec = carmi_proto::submit::parse("job.sub", &file).unwrap();
        let msg = ToGlobal::Submit(Box::new(SubmitRequest {
            owner: "alice".into(),
            machine: "a".into(),
            executable: exe(),
            spec,
            submitted_unix: EPOCH,
            anywhere: false,
            procs: Vec::new(),
            max_materialize: None,
            max_idle: None,
        }));
        let sent = self.step(0, |r, now| r.on_message(ADMIN, msg, now));
        let master = spawned(&sent).expect("the master goes out at once");
        let started = ToGlobal::Started {
            process: master,
            result: Ok(()),
        };
        self.step(0, |r, now| r.on_message(M, started, now));
        master
    }

    fn tick(&mut self, at: u64) -> Vec<FromGlobal> {
        self.step(at, |r, now| r.on_tick(now))
    }

    fn exit(&mut self, at: u64, process: ProcessId, status: ExitStatus) -> Vec<FromGlobal> {
        let exited = ToGlobal::Exited {
            process,
            status,
            cpu_seconds: 0.1,
            usage: Default::default(),
        };
        self.step(at, |r, now| r.on_message(M, exited, now))
    }

    /// Job 1's state and note in `carmi q`, if queued.
    fn state(&mut self) -> Option<(String, Option<String>)> {
        let q = self.r.queue_status();
        q.first().map(|j| (j.state.clone(), j.note.clone()))
    }

    fn history(&self) -> Vec<JobEnd> {
        let records = self.r.reports.history.select(Some(JobId(1)));
        records.into_iter().map(|r| r.end).collect()
    }

    /// Job 1's event log, as `carmi events` reads it.
    fn events(&mut self) -> Vec<EventKind> {
        let ask = ToGlobal::Events {
            job: JobId(1),
            after: 0,
        };
        let sent = self.step(0, |r, now| r.on_message(ADMIN, ask, now));
        match &sent[..] {
            [FromGlobal::Events { events, .. }] => events.iter().map(|e| e.kind.clone()).collect(),
            other => panic!("{other:?}"),
        }
    }
}

fn spawned(sent: &[FromGlobal]) -> Option<ProcessId> {
    sent.iter().find_map(|m| match m {
        FromGlobal::SpawnMaster { process, .. } => Some(*process),
        _ => None,
    })
}

/// True when `journal` holds `records` in this order (others between them).
fn in_order(journal: &[Record], records: &[Record]) -> bool {
    let mut rest = journal.iter();
    records.iter().all(|r| rest.any(|j| j == r))
}

fn killed(sent: &[FromGlobal], p: ProcessId) -> bool {
    sent.iter()
        .any(|m| matches!(m, FromGlobal::Kill { process } if *process == p))
}

#[test]
fn periodic_remove_removes_the_job_at_its_deadline_and_not_before() {
    let mut pool = Pool::new();
    let master = pool.submit("+PeriodicRemove = (time() - QDate) > 5");
    for at in 0..=5 {
        let sent = pool.tick(at);
        assert!(!killed(&sent, master), "removed at {at} s: {sent:?}");
        assert_eq!(pool.state().map(|s| s.0).as_deref(), Some("running"));
    }
    let sent = pool.tick(6);
    assert!(killed(&sent, master), "{sent:?}");
    assert_eq!(pool.state(), None);
    let why = "removed by periodic_remove: (time() - QDate) > 5".to_string();
    assert_eq!(pool.history(), vec![JobEnd::RemovedByPolicy(why.clone())]);
    let ended = pool.journal.iter().any(|r| match r {
        Record::History(h) => h.end == JobEnd::RemovedByPolicy(why.clone()),
        _ => false,
    });
    assert!(ended, "the removal is journaled: {:?}", pool.journal);
    // Nothing is left to evaluate.
    assert!(pool.tick(8).is_empty());
    assert_eq!(pool.r.policy_deadline(), None);
}

#[test]
fn periodic_hold_holds_a_running_job_and_periodic_release_lets_it_start_again() {
    let mut pool = Pool::new();
    let master = pool.submit(
        "+PeriodicHold = JobStatus == 2 && (time() - EnteredCurrentStatus) >= 2\n\
         +PeriodicHoldReason = strcat(\"ran \", RemoteWallClockTime, \" s\")\n\
         +PeriodicHoldSubCode = 7\n\
         +PeriodicRelease = HoldReasonCode == 3 && HoldReasonSubCode == 7 && NumHolds == 1",
    );
    assert!(!killed(&pool.tick(0), master));
    let sent = pool.tick(2);
    assert!(killed(&sent, master), "{sent:?}");
    assert_eq!(
        pool.state(),
        Some(("held".to_string(), Some("ran 2 s".to_string())))
    );
    assert!(pool.journal.contains(&Record::Held {
        job: JobId(1),
        reason: "ran 2 s".into()
    }));
    // Released at the next evaluation: a new master starts.
    let sent = pool.tick(4);
    let again = spawned(&sent).expect("a new master starts");
    assert_ne!(again, master);
    assert!(pool.journal.contains(&Record::Released { job: JobId(1) }));
    let events = pool.events();
    let kinds: Vec<&str> = events.iter().map(|k| k.word()).collect();
    assert!(
        kinds.ends_with(&["master-started", "held", "released", "host-added"]),
        "{kinds:?}"
    );
    // Held again two seconds after it started, and not released a second time.
    let started = ToGlobal::Started {
        process: again,
        result: Ok(()),
    };
    pool.step(4, |r, now| r.on_message(M, started, now));
    assert!(killed(&pool.tick(6), again));
    pool.tick(8);
    assert_eq!(pool.state().map(|s| s.0).as_deref(), Some("held"));
}

#[test]
fn periodic_hold_without_a_reason_names_its_expression() {
    let mut pool = Pool::new();
    pool.submit("+PeriodicHold = NumJobStarts > 0");
    pool.tick(0);
    let note = pool.state().and_then(|s| s.1);
    assert_eq!(note.as_deref(), Some("periodic_hold: NumJobStarts > 0"));
}

#[test]
fn undefined_and_erroneous_expressions_count_as_false() {
    let mut pool = Pool::new();
    let master = pool.submit(
        "+PeriodicRemove = NoSuchAttribute > 5\n\
         +PeriodicHold = \"yes\"\n\
         +OnExitHold = 1 / 0 == 1\n\
         +OnExitRemove = NoSuchAttribute == 1",
    );
    for at in [0, 2, 4, 6] {
        assert!(!killed(&pool.tick(at), master));
    }
    assert_eq!(pool.state().map(|s| s.0).as_deref(), Some("running"));
    // An undefined `OnExitRemove` is its default: the job ends.
    pool.exit(7, master, ExitStatus::Code(1));
    assert_eq!(pool.state(), None);
    assert_eq!(pool.history(), vec![JobEnd::Completed(ExitStatus::Code(1))]);
}

#[test]
fn on_exit_remove_false_requeues_the_job_until_it_succeeds() {
    let mut pool = Pool::new();
    let master = pool.submit("+OnExitRemove = ExitCode == 0");
    let sent = pool.exit(3, master, ExitStatus::Code(1));
    let again = spawned(&sent).expect("the job goes back to the queue and starts again");
    assert!(pool.history().is_empty());
    assert!(in_order(
        &pool.journal,
        &[
            Record::Held {
                job: JobId(1),
                reason: "on_exit_remove = ExitCode == 0 is false (the master ended with exit 1)"
                    .into()
            },
            Record::Released { job: JobId(1) },
            Record::Started {
                job: JobId(1),
                master: again,
                placed: None
            },
        ]
    ));
    let started = ToGlobal::Started {
        process: again,
        result: Ok(()),
    };
    pool.step(4, |r, now| r.on_message(M, started, now));
    pool.exit(5, again, ExitStatus::Code(0));
    assert_eq!(pool.state(), None);
    let records = pool.r.reports.history.select(Some(JobId(1)));
    assert_eq!(records.len(), 1);
    assert_eq!(records[0].end, JobEnd::Completed(ExitStatus::Code(0)));
    assert_eq!(records[0].usage.starts, 2);
}

#[test]
fn a_restart_replays_a_requeue_and_does_not_judge_the_exit_again() {
    let mut pool = Pool::new();
    let master = pool.submit("+OnExitRemove = ExitCode == 0\n+OnExitHold = NumJobStarts > 1");
    pool.exit(3, master, ExitStatus::Code(1));
    let journal = pool.journal.clone();
    for journal in [journal.clone(), Live::of(&journal).records()] {
        let mut again = Pool::recovered(journal);
        // Started again as the requeue left it: neither ended nor held.
        assert_eq!(again.state().map(|s| s.0).as_deref(), Some("running"));
        assert!(again.history().is_empty());
        assert!(
            !again
                .journal
                .iter()
                .any(|r| matches!(r, Record::Held { .. }))
        );
        // Its policy is indexed again, and judges its next master's exit.
        assert!(again.r.jobs.policies.jobs.contains_key(&JobId(1)));
        let next = again.r.jobs.submitted[&JobId(1)].master.expect("a master");
        let started = ToGlobal::Started {
            process: next,
            result: Ok(()),
        };
        again.step(1, |r, now| r.on_message(M, started, now));
        again.exit(2, next, ExitStatus::Code(0));
        assert_eq!(
            again.history(),
            vec![JobEnd::Completed(ExitStatus::Code(0))]
        );
    }
}

#[test]
fn on_exit_hold_holds_the_job_with_its_reason() {
    let mut pool = Pool::new();
    let master =
        pool.submit("+OnExitHold = ExitCode != 0\n+OnExitHoldReason = strcat(\"exit \", ExitCode)");
    let sent = pool.exit(3, master, ExitStatus::Code(3));
    assert!(spawned(&sent).is_none());
    assert_eq!(
        pool.state(),
        Some(("held".to_string(), Some("exit 3".to_string())))
    );
    assert!(pool.history().is_empty());
    assert!(pool.events().contains(&EventKind::Held {
        reason: "exit 3".into()
    }));
}

#[test]
fn on_exit_hold_without_a_reason_names_its_expression_and_signals_count() {
    let mut pool = Pool::new();
    let master = pool.submit("+OnExitHold = ExitBySignal && ExitSignal == 9");
    pool.exit(3, master, ExitStatus::Signal(9));
    let note = pool.state().and_then(|s| s.1);
    assert_eq!(
        note.as_deref(),
        Some("on_exit_hold: ExitBySignal && ExitSignal == 9 (the master ended with signal 9)")
    );
}

#[test]
fn a_lost_machine_is_no_exit_for_on_exit_remove() {
    let mut pool = Pool::new();
    let master = pool.submit("+OnExitRemove = false");
    pool.step(1, |r, _| {
        r.master_report(master, JobId(1), Err(ExitStatus::HostLost))
    });
    assert_eq!(
        pool.history(),
        vec![JobEnd::Completed(ExitStatus::HostLost)]
    );
}

#[test]
fn on_exit_expressions_read_memory_usage_and_num_job_starts() {
    let mut pool = Pool::new();
    let master = pool.submit(
        "+OnExitRemove = NumJobStarts >= 2\n\
         +OnExitHold = MemoryUsage > 100 && ResidentSetSize == 204800",
    );
    // The first run: one start, within 100 MiB: back to the queue.
    let sent = pool.exit(2, master, ExitStatus::Code(0));
    let again = spawned(&sent).expect("started again");
    let started = ToGlobal::Started {
        process: again,
        result: Ok(()),
    };
    pool.step(3, |r, now| r.on_message(M, started, now));
    // The second used 200 MiB at its peak: held, though its starts are enough.
    let exited = ToGlobal::Exited {
        process: again,
        status: ExitStatus::Code(0),
        cpu_seconds: 0.1,
        usage: carmi_proto::msg::ProcessUsage {
            memory_peak_kib: 200 * 1024,
            memory_exceeded_mib: None,
        },
    };
    pool.step(4, |r, now| r.on_message(M, exited, now));
    let note = pool.state().and_then(|s| s.1);
    assert_eq!(
        note.as_deref(),
        Some(
            "on_exit_hold: MemoryUsage > 100 && ResidentSetSize == 204800 \
             (the master ended with exit 0)"
        )
    );
    assert!(pool.history().is_empty());
}
