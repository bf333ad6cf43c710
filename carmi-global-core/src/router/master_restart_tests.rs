//! A submitted job's master across a SIGKILL of the global RM (issue 15
//! item 3), from the journal as written and compacted: a `SpawnMaster` that
//! died with the killed global RM (the master was never reported started)
//! is sent again when its machine registers without it, where the job used
//! to end as if its master were lost; a master that was reported running
//! and is missing from its machine was lost, and its job still ends. And a
//! job whose hosts' machines register last takes no other host meanwhile.

use std::time::Duration;

use carmi_proto::ids::{JobId, ProcessId};
use carmi_proto::msg::{FromGlobal, Role, SubmitRequest, ToGlobal};

use super::hand_tests::step;
use super::jobs_tests::{advertise, exe};
use super::{LinkId, Router, RouterConfig};
use crate::journal::{self, Record};

const ADMIN: LinkId = LinkId(100);

/// A pool of m0 and a job submitted there: the router, the journal so far
/// and the master sent to m0.
fn submitted() -> (Router, Vec<Record>, ProcessId) {
    let mut r = Router::new(RouterConfig::default());
    let mut journal = advertise(&mut r, LinkId(1), "m0", vec![]).1;
    r.on_executable_stored(&exe("master"));
    step(&mut r, |r| {
        r.on_link_opened(ADMIN, Role::Admin, Duration::ZERO)
    });
    let spec = carmi_proto::submit::parse("j", "executable = master\nqueue\n").unwrap();
    let submit = ToGlobal::Submit(Box::new(SubmitRequest {
        owner: "alice".into(),
        machine: "m0".into(),
        executable: exe("master"),
        spec,
        submitted_unix: 0,
        anywhere: false,
        procs: Vec::new(),
        max_materialize: None,
        max_idle: None,
    }));
    let (sends, records) = step(&mut r, |r| r.on_message(ADMIN, submit, Duration::ZERO));
    journal.extend(records);
    let Some((_, FromGlobal::SpawnMaster { process, .. })) = sends.last() else {
        panic!("{sends:?}");
    };
    (r, journal, *process)
}

/// Routers recovered from `journal` as written and compacted, m0
/// registered again running nothing; with what m0's next heartbeat (after
/// its backlog) made each send and write.
fn restarted_without_it(journal: &[Record]) -> Vec<(Router, Vec<FromGlobal>, Vec<Record>)> {
    let compacted = journal::Live::of(journal).records();
    [journal.to_vec(), compacted]
        .into_iter()
        .map(|journal| {
            let mut r = Router::new(RouterConfig::default());
            r.recover(journal);
            r.on_executable_stored(&exe("master"));
            let (sends, _) = advertise(&mut r, LinkId(2), "m0", vec![]);
            assert!(
                !sends
                    .iter()
                    .any(|(_, m)| matches!(m, FromGlobal::SpawnMaster { .. })),
                "not before the backlog is in: {sends:?}"
            );
            let hb = ToGlobal::Heartbeat {
                update: String::new(),
            };
            let (sends, records) = step(&mut r, |r| r.on_message(LinkId(2), hb, Duration::ZERO));
            let sends = sends.into_iter().map(|(_, m)| m).collect();
            (r, sends, records)
        })
        .collect()
}

#[test]
fn a_master_whose_spawn_died_with_the_killed_global_rm_is_sent_again() {
    let (_, journal, master) = submitted();
    for (mut r, sends, records) in restarted_without_it(&journal) {
        assert!(
            !records.contains(&Record::Ended { job: JobId(1) }),
            "{records:?}"
        );
        match &sends[..] {
            [FromGlobal::SpawnMaster { process, job, .. }] => {
                assert_eq!((*process, *job), (master, JobId(1)))
            }
            other => panic!("the master is sent again, once: {other:?}"),
        }
        // Once it runs, a restart knows it ran.
        let started = ToGlobal::Started {
            process: master,
            result: Ok(()),
        };
        let (_, records) = step(&mut r, |r| r.on_message(LinkId(2), started, Duration::ZERO));
        assert!(
            records.contains(&Record::Running { process: master }),
            "{records:?}"
        );
        assert!(r.allocator().has_job(JobId(1)));
    }
}

#[test]
fn a_master_reported_running_and_missing_after_a_restart_was_lost() {
    let (mut r, mut journal, master) = submitted();
    let started = ToGlobal::Started {
        process: master,
        result: Ok(()),
    };
    let (_, records) = step(&mut r, |r| r.on_message(LinkId(1), started, Duration::ZERO));
    assert!(
        records.contains(&Record::Running { process: master }),
        "{records:?}"
    );
    journal.extend(records);
    for (r, sends, records) in restarted_without_it(&journal) {
        assert!(
            records.contains(&Record::Ended { job: JobId(1) }),
            "{records:?}"
        );
        assert!(
            !sends
                .iter()
                .any(|m| matches!(m, FromGlobal::SpawnMaster { .. })),
            "{sends:?}"
        );
        assert!(!r.allocator().has_job(JobId(1)));
    }
}

#[test]
fn a_recovered_master_its_machine_still_runs_is_running() {
    let (_, journal, master) = submitted();
    let compacted = journal::Live::of(&journal).records();
    for journal in [journal, compacted] {
        let mut r = Router::new(RouterConfig::default());
        r.recover(journal);
        let (sends, records) = advertise(&mut r, LinkId(2), "m0", vec![master]);
        assert!(
            !sends.iter().any(|(_, m)| matches!(
                m,
                FromGlobal::SpawnMaster { .. } | FromGlobal::Kill { .. }
            )),
            "{sends:?}"
        );
        assert!(
            records.contains(&Record::Running { process: master }),
            "{records:?}"
        );
        let hb = ToGlobal::Heartbeat {
            update: String::new(),
        };
        let (sends, records) = step(&mut r, |r| r.on_message(LinkId(2), hb, Duration::ZERO));
        assert!(
            sends.is_empty() && records.is_empty(),
            "{sends:?} {records:?}"
        );
        assert!(r.allocator().has_job(JobId(1)));
    }
}

/// A submitted job of two hosts, its machines registering again after the
/// restart after the others: it takes none of the others meanwhile (it took
/// one, and held 3 of its 2 once its own machines were back).
#[test]
fn a_job_takes_no_other_host_while_its_own_machines_come_back() {
    let mut r = Router::new(RouterConfig::default());
    let mut journal = Vec::new();
    for i in 0..3 {
        journal.extend(advertise(&mut r, LinkId(i + 1), &format!("m{i}"), vec![]).1);
    }
    r.on_executable_stored(&exe("master"));
    step(&mut r, |r| {
        r.on_link_opened(ADMIN, Role::Admin, Duration::ZERO)
    });
    let text = "executable = master\nclass_name = w\nmachine_count = 2\nqueue\n";
    let submit = ToGlobal::Submit(Box::new(SubmitRequest {
        owner: "alice".into(),
        machine: "m0".into(),
        executable: exe("master"),
        spec: carmi_proto::submit::parse("j", text).unwrap(),
        submitted_unix: 0,
        anywhere: false,
        procs: Vec::new(),
        max_materialize: None,
        max_idle: None,
    }));
    let (sends, records) = step(&mut r, |r| r.on_message(ADMIN, submit, Duration::ZERO));
    journal.extend(records);
    let Some((_, FromGlobal::SpawnMaster { process, .. })) = sends.last() else {
        panic!("{sends:?}");
    };
    let started = ToGlobal::Started {
        process: *process,
        result: Ok(()),
    };
    journal.extend(step(&mut r, |r| r.on_message(LinkId(1), started, Duration::ZERO)).1);
    let mut held = r.allocator().job_hosts(JobId(1));
    held.sort();
    assert_eq!(held.len(), 2);
    let mine: Vec<String> = held
        .iter()
        .map(|&h| r.allocator().host_machine(h).unwrap().to_string())
        .collect();
    // The machines without the job's hosts register first.
    let mut order: Vec<usize> = (0..3).collect();
    order.sort_by_key(|i| mine.contains(&format!("m{i}")));
    let compacted = journal::Live::of(&journal).records();
    for journal in [journal.clone(), compacted] {
        let mut r = Router::new(RouterConfig::default());
        r.recover(journal);
        for &i in &order {
            let running = if i == 0 { vec![*process] } else { vec![] };
            advertise(&mut r, LinkId(10 + i as u64), &format!("m{i}"), running);
            let now = r.allocator().job_hosts(JobId(1));
            assert!(
                now.iter().all(|h| held.contains(h)),
                "after m{i}: {now:?}, not within {held:?}"
            );
        }
        let mut now = r.allocator().job_hosts(JobId(1));
        now.sort();
        assert_eq!(now, held);
    }
}

/// The master still launching (its executable being fetched) when its
/// machine registers again, reported started before the next heartbeat: it
/// runs, and its job goes on (the heartbeat took it for lost).
#[test]
fn a_master_launching_when_its_machine_registers_again_is_not_lost() {
    let (_, journal, master) = submitted();
    let compacted = journal::Live::of(&journal).records();
    for journal in [journal, compacted] {
        let mut r = Router::new(RouterConfig::default());
        r.recover(journal);
        advertise(&mut r, LinkId(2), "m0", vec![]);
        let started = ToGlobal::Started {
            process: master,
            result: Ok(()),
        };
        step(&mut r, |r| r.on_message(LinkId(2), started, Duration::ZERO));
        let hb = ToGlobal::Heartbeat {
            update: String::new(),
        };
        let (sends, records) = step(&mut r, |r| r.on_message(LinkId(2), hb, Duration::ZERO));
        assert!(
            !records.contains(&Record::Ended { job: JobId(1) }),
            "{records:?}"
        );
        assert!(sends.is_empty(), "{sends:?}");
        assert!(r.allocator().has_job(JobId(1)));
    }
}
