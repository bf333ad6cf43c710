//! Clusters of procs at the router: one submit makes procs with contiguous
//! ids sharing the cluster's, accepted whole or refused whole; `rm C`,
//! `hold C` and `release C` act on all of them; a restart keeps them.

use std::time::Duration;

use carmi_proto::ids::JobId;
use carmi_proto::msg::{FailureCode, FromGlobal, JobStatus, Role, SubmitRequest, ToGlobal};
use carmi_proto::submit::JobSpec;

use super::hand_tests::step;
use super::jobs_tests::{advertise, exe};
use super::{LinkId, Router, RouterConfig};
use crate::journal::Record;

const ADMIN: LinkId = LinkId(100);

fn proc_spec(arg: &str) -> JobSpec {
    let text = format!("executable = master\narguments = $(ClusterId) {arg}\nqueue\n");
    carmi_proto::submit::parse("j", &text).unwrap()
}

/// A cluster of `n` procs, proc P with the argument `pP`, on machine m0.
fn cluster(n: usize) -> ToGlobal {
    ToGlobal::Submit(Box::new(SubmitRequest {
        owner: "alice".into(),
        machine: "m0".into(),
        executable: exe("master"),
        spec: proc_spec("p0"),
        submitted_unix: 5,
        anywhere: false,
        procs: (1..n).map(|p| proc_spec(&format!("p{p}"))).collect(),
        max_materialize: None,
        max_idle: None,
    }))
}

/// A router with machine m0 (2 slots), an admin link and the master stored.
fn router() -> (Router, Vec<Record>) {
    let mut r = Router::new(RouterConfig::default());
    let mut journal = step(&mut r, |_| {}).1;
    journal.extend(advertise(&mut r, LinkId(1), "m0", vec![]).1);
    r.on_executable_stored(&exe("master"));
    step(&mut r, |r| {
        r.on_link_opened(ADMIN, Role::Admin, Duration::ZERO)
    });
    (r, journal)
}

fn ask(r: &mut Router, msg: ToGlobal) -> (FromGlobal, Vec<Record>) {
    let (sends, records) = step(r, |r| r.on_message(ADMIN, msg, Duration::ZERO));
    let answer = sends
        .into_iter()
        .find(|(l, _)| *l == ADMIN)
        .map(|(_, m)| m)
        .expect("an answer to the admin");
    (answer, records)
}

fn queue(r: &mut Router) -> Vec<JobStatus> {
    match ask(r, ToGlobal::Queue).0 {
        FromGlobal::Queue(jobs) => jobs,
        other => panic!("{other:?}"),
    }
}

/// (job, cluster, proc) of every job in the queue.
fn ids(jobs: &[JobStatus]) -> Vec<(u64, Option<u64>, u32)> {
    let mut v: Vec<_> = jobs
        .iter()
        .map(|j| (j.job.0, j.cluster.map(|c| c.0), j.proc))
        .collect();
    v.sort();
    v
}

#[test]
fn a_cluster_of_three_procs_has_contiguous_ids_and_its_own_cluster_id_in_every_proc() {
    let (mut r, _) = router();
    let (answer, records) = ask(&mut r, cluster(3));
    assert_eq!(answer, FromGlobal::Submitted { job: JobId(1) });
    let submitted: Vec<_> = records
        .iter()
        .filter_map(|x| match x {
            Record::Submitted {
                job,
                cluster,
                request,
            } => Some((job.0, cluster.map(|c| c.0), request.procs.len())),
            _ => None,
        })
        .collect();
    // One record per proc, each with its proc's spec alone.
    assert_eq!(
        submitted,
        vec![(1, None, 0), (2, Some(1), 0), (3, Some(1), 0)]
    );
    assert_eq!(
        ids(&queue(&mut r)),
        vec![(1, Some(1), 0), (2, Some(1), 1), (3, Some(1), 2)]
    );
    // `$(ClusterId)` is the cluster's id in every proc, not the proc's job id.
    for job in 1..=3u64 {
        let sub = &r.jobs.submitted[&JobId(job)];
        let p = job - 1;
        assert_eq!(sub.spec.arguments, vec!["1".to_string(), format!("p{p}")]);
    }
    // The next cluster starts after the last proc.
    let (answer, _) = ask(&mut r, cluster(1));
    assert_eq!(answer, FromGlobal::Submitted { job: JobId(4) });
}

#[test]
fn rm_of_a_cluster_removes_every_proc_and_a_proc_id_is_not_a_cluster() {
    let (mut r, _) = router();
    ask(&mut r, cluster(3));
    ask(&mut r, cluster(1));
    let (answer, _) = ask(
        &mut r,
        ToGlobal::RemoveJob {
            job: JobId(2),
            cluster: true,
        },
    );
    match answer {
        FromGlobal::AdminFailed(f) => {
            assert_eq!(f.code, FailureCode::Invalid);
            assert!(f.message.contains("proc 1.1"), "{}", f.message);
        }
        other => panic!("{other:?}"),
    }
    let (answer, _) = ask(
        &mut r,
        ToGlobal::RemoveJob {
            job: JobId(1),
            cluster: true,
        },
    );
    assert_eq!(answer, FromGlobal::Removed { job: JobId(1) });
    // The other cluster stays.
    assert_eq!(ids(&queue(&mut r)), vec![(4, Some(4), 0)]);
    let history = match ask(&mut r, ToGlobal::History { job: None }).0 {
        FromGlobal::History(h) => h,
        other => panic!("{other:?}"),
    };
    let ended: Vec<_> = history
        .iter()
        .map(|h| (h.job.0, h.cluster.map(|c| c.0), h.proc))
        .collect();
    assert_eq!(
        ended,
        vec![(1, Some(1), 0), (2, Some(1), 1), (3, Some(1), 2)]
    );
}

/// `release 1` of a cluster: none of its procs stays held.
fn release_cluster_1(r: &mut Router) {
    let release = ToGlobal::Release {
        job: JobId(1),
        cluster: true,
    };
    assert_eq!(ask(r, release).0, FromGlobal::Released { job: JobId(1) });
    assert!(queue(r).iter().all(|j| j.state != "held"));
}

#[test]
fn hold_and_release_of_a_cluster_act_on_every_proc() {
    let (mut r, _) = router();
    ask(&mut r, cluster(2));
    let hold = ToGlobal::Hold {
        job: JobId(1),
        cluster: true,
        reason: None,
        user: "alice".into(),
    };
    assert_eq!(ask(&mut r, hold).0, FromGlobal::Held { job: JobId(1) });
    let states: Vec<_> = queue(&mut r).into_iter().map(|j| j.state).collect();
    assert_eq!(states, vec!["held", "held"]);
    release_cluster_1(&mut r);
}

#[test]
fn a_cluster_with_one_proc_over_a_limit_is_refused_whole_and_spends_no_id() {
    let (mut r, _) = router();
    let mut msg = cluster(3);
    if let ToGlobal::Submit(req) = &mut msg {
        req.procs[1].master_requirements = Some("((".into());
    }
    let (answer, records) = ask(&mut r, msg);
    match answer {
        FromGlobal::AdminFailed(f) => assert!(f.message.starts_with("proc 2: "), "{}", f.message),
        other => panic!("{other:?}"),
    }
    assert!(records.is_empty(), "{records:?}");
    assert!(queue(&mut r).is_empty());
    assert_eq!(
        ask(&mut r, cluster(1)).0,
        FromGlobal::Submitted { job: JobId(1) }
    );
}

#[test]
fn a_restart_keeps_each_proc_in_its_cluster() {
    let (mut r, mut journal) = router();
    let (_, records) = ask(&mut r, cluster(3));
    journal.extend(records);
    let mut again = Router::new(RouterConfig::default());
    again.recover(journal);
    step(&mut again, |r| {
        r.on_link_opened(ADMIN, Role::Admin, Duration::ZERO)
    });
    assert_eq!(
        ids(&queue(&mut again)),
        vec![(1, Some(1), 0), (2, Some(1), 1), (3, Some(1), 2)]
    );
    let sub = &again.jobs.submitted[&JobId(3)];
    assert_eq!(sub.spec.arguments, vec!["1".to_string(), "p2".to_string()]);
}

/// A cluster of `n` procs with `max_materialize = m`.
fn bounded(n: usize, m: u32) -> ToGlobal {
    let mut msg = cluster(n);
    if let ToGlobal::Submit(req) = &mut msg {
        req.max_materialize = Some(m);
    }
    msg
}

fn remove(job: u64) -> ToGlobal {
    ToGlobal::RemoveJob {
        job: JobId(job),
        cluster: false,
    }
}

/// The arguments of every queued job, by job id.
fn args(r: &Router) -> Vec<(u64, String)> {
    let mut v: Vec<_> = r
        .jobs
        .submitted
        .iter()
        .map(|(j, s)| (j.0, s.spec.arguments.join(" ")))
        .collect();
    v.sort();
    v
}

#[test]
fn max_materialize_keeps_that_many_procs_queued_and_the_next_takes_an_ended_ones_place() {
    let (mut r, _) = router();
    let (answer, records) = ask(&mut r, bounded(5, 2));
    assert_eq!(answer, FromGlobal::Submitted { job: JobId(1) });
    assert!(
        records.iter().any(
            |x| matches!(x, Record::Pending { first: 2, request, .. } if request.procs.len() == 2)
        ),
        "{records:?}"
    );
    assert_eq!(args(&r), vec![(1, "1 p0".into()), (2, "1 p1".into())]);
    // The ids of all five were given: the next cluster comes after them.
    assert_eq!(
        ask(&mut r, cluster(1)).0,
        FromGlobal::Submitted { job: JobId(6) }
    );
    // Proc 0 leaves: proc 2 takes its place, with its own id and arguments.
    let (_, records) = ask(&mut r, remove(1));
    assert!(
        records.iter().any(|x| matches!(
            x,
            Record::Submitted {
                job: JobId(3),
                cluster: Some(JobId(1)),
                ..
            }
        )),
        "{records:?}"
    );
    assert_eq!(
        args(&r),
        vec![(2, "1 p1".into()), (3, "1 p2".into()), (6, "6 p0".into())]
    );
    // `rm C` removes the queued procs and drops the waiting ones.
    let (answer, records) = ask(
        &mut r,
        ToGlobal::RemoveJob {
            job: JobId(1),
            cluster: true,
        },
    );
    assert_eq!(answer, FromGlobal::Removed { job: JobId(1) });
    assert!(
        records
            .iter()
            .any(|x| matches!(x, Record::PendingDropped { cluster: JobId(1) })),
        "{records:?}"
    );
    assert_eq!(args(&r), vec![(6, "6 p0".into())]);
}

#[test]
fn waiting_procs_survive_a_restart_and_a_compaction_of_the_journal() {
    let (mut r, mut journal) = router();
    journal.extend(ask(&mut r, bounded(4, 1)).1);
    journal.extend(ask(&mut r, remove(1)).1);
    assert_eq!(args(&r), vec![(2, "1 p1".into())]);
    // Replayed as written, and compacted to the shortest journal.
    let compacted = crate::journal::Live::of(&journal).records();
    for records in [journal, compacted] {
        let mut again = Router::new(RouterConfig::default());
        again.recover(records);
        again.on_executable_stored(&exe("master"));
        step(&mut again, |r| {
            r.on_link_opened(ADMIN, Role::Admin, Duration::ZERO)
        });
        assert_eq!(args(&again), vec![(2, "1 p1".into())]);
        ask(&mut again, remove(2));
        assert_eq!(args(&again), vec![(3, "1 p2".into())]);
        ask(&mut again, remove(3));
        assert_eq!(args(&again), vec![(4, "1 p3".into())]);
        ask(&mut again, remove(4));
        assert!(args(&again).is_empty());
        // The ids of the whole cluster stay given.
        assert_eq!(again.jobs.next_job, 5);
    }
}

#[test]
fn hold_true_queues_every_proc_held_until_released() {
    let (mut r, _) = router();
    let mut msg = cluster(2);
    let held = |arg: &str| {
        let text = format!("executable = master\narguments = {arg}\nhold = true\nqueue\n");
        carmi_proto::submit::parse("j", &text).unwrap()
    };
    if let ToGlobal::Submit(req) = &mut msg {
        req.spec = held("p0");
        req.procs = vec![held("p1")];
    }
    assert_eq!(ask(&mut r, msg).0, FromGlobal::Submitted { job: JobId(1) });
    let jobs = queue(&mut r);
    assert!(jobs.iter().all(|j| j.state == "held"), "{jobs:?}");
    assert!(
        jobs[0]
            .note
            .as_deref()
            .unwrap_or_default()
            .contains("hold = true"),
        "{jobs:?}"
    );
    release_cluster_1(&mut r);
}

#[test]
fn transfer_output_remaps_names_where_an_output_file_goes() {
    let text = "executable = master\ninitialdir = /tmp\ntransfer_output_files = a.txt, b.txt\ntransfer_output_remaps = \"a.txt = results/a-$(ClusterId).txt; b.txt = /abs/b.txt\"\nqueue\n";
    let spec = carmi_proto::submit::parse("j", text).unwrap();
    let (mut r, _) = router();
    let mut msg = cluster(1);
    if let ToGlobal::Submit(req) = &mut msg {
        req.spec = spec;
    }
    assert_eq!(ask(&mut r, msg).0, FromGlobal::Submitted { job: JobId(1) });
    let plan = super::jobs::return_plan(&r.jobs.submitted[&JobId(1)]);
    assert_eq!(
        plan,
        vec![
            ("a.txt".to_string(), "/tmp/results/a-1.txt".to_string()),
            ("b.txt".to_string(), "/abs/b.txt".to_string()),
        ]
    );
}
