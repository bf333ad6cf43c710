//! The waiting queue in clusters: a pass tries one job per cluster, keeps
//! submit order across clusters, and reacts to the head leaving; a submit
//! or a removal tries at most the job itself.

use super::tests::Sim;
use super::*;

fn limits(expr: &str, min: u32) -> ClassLimits {
    ClassLimits {
        name: "c".into(),
        expression: expr.into(),
        min,
        max: min,
        rank: None,
    }
}

/// `n` one-slot X86_64 machines.
fn pool(s: &mut Sim, n: u32) {
    for i in 0..n {
        s.machine(&format!("m{i}"), "Arch = \"X86_64\"; Mips = 100", 1);
    }
}

fn take_started(s: &mut Sim) -> Vec<JobId> {
    let mut out = Vec::new();
    s.log.retain(|e| match e {
        Effect::JobStarted { job } => {
            out.push(*job);
            false
        }
        Effect::Released { .. } => false,
        _ => true,
    });
    out
}

#[test]
fn a_submit_into_a_long_queue_tries_one_job_per_cluster() {
    let mut s = Sim::new();
    pool(&mut s, 4);
    // A thousand jobs no machine can serve: each pass would try every one of
    // them (idle slots stay free for the jobs behind), were they not clustered.
    let never = [limits("Arch == \"PPC\"", 1)];
    for i in 1..=1000 {
        s.step(|a| a.submit_job(JobId(i), "alice", &never)).unwrap();
    }
    assert_eq!(s.a.waiting_clusters(), 1);
    let before = s.a.start_attempts();
    for i in 1001..=1010 {
        s.step(|a| a.submit_job(JobId(i), "alice", &never)).unwrap();
    }
    let per_submit = (s.a.start_attempts() - before) as f64 / 10.0;
    assert!(per_submit <= 1.0, "{per_submit} start attempts per submit");
    // A job behind them that fits still starts on the free slots.
    let fits = [limits("Arch == \"X86_64\"", 2)];
    s.step(|a| a.submit_job(JobId(2000), "bob", &fits)).unwrap();
    assert_eq!(take_started(&mut s), [JobId(2000)]);
    assert_eq!(s.a.waiting_clusters(), 1);
    // Removing a job with an identical one ahead of it settles nothing;
    // removing the first of them tries the next one.
    let before = s.a.start_attempts();
    s.step(|a| a.on_job_ended(JobId(500)));
    assert_eq!(s.a.start_attempts(), before);
    s.step(|a| a.on_job_ended(JobId(1)));
    assert_eq!(s.a.start_attempts(), before + 1);
    s.quiet();
}

#[test]
fn clusters_start_in_submit_order() {
    let mut s = Sim::new();
    pool(&mut s, 2);
    let two = [limits("true", 2)];
    let (a1, b1, a2) = (JobId(1), JobId(2), JobId(3));
    s.step(|a| a.submit_job(a1, "alice", &two)).unwrap();
    s.step(|a| a.submit_job(b1, "bob", &two)).unwrap();
    s.step(|a| a.submit_job(a2, "alice", &two)).unwrap();
    assert_eq!(take_started(&mut s), [a1]);
    assert_eq!(s.a.waiting_clusters(), 2);
    // Alice's second job is behind Bob's: Bob goes first.
    s.step(|a| a.on_job_ended(a1));
    assert_eq!(take_started(&mut s), [b1]);
    s.step(|a| a.on_job_ended(b1));
    assert_eq!(take_started(&mut s), [a2]);
    assert_eq!(s.a.waiting_clusters(), 0);
    s.quiet();
}

#[test]
fn removing_a_waiting_head_lets_the_job_behind_it_start() {
    let mut s = Sim::new();
    pool(&mut s, 2);
    // One slot runs a job; the head needs both and keeps the idle one for
    // itself; the job behind it may not take it.
    s.step(|a| a.submit_job(JobId(1), "carol", &[limits("true", 1)]))
        .unwrap();
    assert_eq!(take_started(&mut s), [JobId(1)]);
    s.step(|a| a.submit_job(JobId(2), "alice", &[limits("true", 2)]))
        .unwrap();
    s.step(|a| a.submit_job(JobId(3), "bob", &[limits("true", 1)]))
        .unwrap();
    assert_eq!(take_started(&mut s), []);
    s.step(|a| a.on_job_ended(JobId(2)));
    assert_eq!(take_started(&mut s), [JobId(3)]);
    s.quiet();
}

#[test]
fn jobs_whose_classes_name_their_job_id_are_clusters_of_their_own() {
    let mut s = Sim::new();
    pool(&mut s, 1);
    // The same text, but only job 2 is a member: job 1 failing says nothing of job 2.
    let only_two = [limits("TARGET.JobId == 2", 1)];
    s.step(|a| a.submit_job(JobId(1), "alice", &only_two))
        .unwrap();
    s.step(|a| a.submit_job(JobId(2), "alice", &only_two))
        .unwrap();
    assert_eq!(take_started(&mut s), [JobId(2)]);
    assert_eq!(s.a.waiting_clusters(), 1);
    s.quiet();
}

#[test]
fn jobs_that_all_differ_are_tried_one_per_submit_and_not_again_on_removal() {
    let mut s = Sim::new();
    pool(&mut s, 4);
    for i in 1..=300 {
        let differs = [limits(&format!("Arch == \"PPC\" && Memory >= {i}"), 1)];
        let before = s.a.start_attempts();
        s.step(|a| a.submit_job(JobId(i), "alice", &differs))
            .unwrap();
        assert_eq!(s.a.start_attempts() - before, 1, "submit of job {i}");
    }
    assert_eq!(s.a.waiting_clusters(), 300);
    // A job behind them that fits starts on the slots none of them can use.
    s.step(|a| a.submit_job(JobId(1000), "bob", &[limits("Arch == \"X86_64\"", 2)]))
        .unwrap();
    assert_eq!(take_started(&mut s), [JobId(1000)]);
    // Removing a job that kept no slot from anyone tries nothing; removing
    // the head (which may take hosts from running jobs) settles the queue.
    let before = s.a.start_attempts();
    s.step(|a| a.on_job_ended(JobId(150)));
    assert_eq!(s.a.start_attempts(), before);
    s.step(|a| a.on_job_ended(JobId(1)));
    assert!(s.a.start_attempts() > before);
    s.quiet();
}

#[test]
fn a_job_tried_alone_keeps_its_slots_from_the_jobs_behind_it() {
    let mut s = Sim::new();
    pool(&mut s, 2);
    // One slot runs a job.
    s.step(|a| a.submit_job(JobId(10), "dave", &[limits("true", 1)]))
        .unwrap();
    assert_eq!(take_started(&mut s), [JobId(10)]);
    // A head that cannot start keeps nothing from a job that fits elsewhere...
    s.step(|a| a.submit_job(JobId(1), "alice", &[limits("Arch == \"PPC\"", 1)]))
        .unwrap();
    // ...then one that needs both slots keeps the idle one,
    s.step(|a| a.submit_job(JobId(2), "bob", &[limits("true", 2)]))
        .unwrap();
    // so a small job behind it waits,
    s.step(|a| a.submit_job(JobId(3), "carol", &[limits("true", 1)]))
        .unwrap();
    assert_eq!(take_started(&mut s), []);
    // and starts once the job that kept the slots is removed.
    s.step(|a| a.on_job_ended(JobId(2)));
    assert_eq!(take_started(&mut s), [JobId(3)]);
    s.quiet();
}
