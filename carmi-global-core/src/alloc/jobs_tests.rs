//! Submitted jobs: all-or-nothing start, growth, fair shares, analysis.

use super::tests::{Sim, r};
use super::*;
use carmi_proto::msg::SlotActivity;

const J1: JobId = JobId(1);
const J2: JobId = JobId(2);

fn limits(name: &str, expr: &str, min: u32, max: u32) -> ClassLimits {
    ClassLimits {
        name: name.into(),
        expression: expr.into(),
        min,
        max,
        rank: None,
    }
}

/// `n` one-slot X86_64 machines, plus the hosts.
fn pool(s: &mut Sim, n: u32) -> Vec<HostId> {
    (0..n)
        .map(|i| {
            s.machine(
                &format!("m{i}"),
                &format!("Arch = \"X86_64\"; Mips = {}", 100 + i),
                1,
            )[0]
        })
        .collect()
}

fn held(s: &Sim, job: JobId) -> u32 {
    s.a.class_status(job).iter().map(|c| c.held).sum()
}

#[test]
fn minimums_that_cannot_both_be_met_start_one_after_the_other() {
    let mut s = Sim::new();
    pool(&mut s, 6);
    let need4 = [limits("any", "true", 4, 4)];
    s.step(|a| a.submit_job(J1, "alice", &need4)).unwrap();
    s.step(|a| a.submit_job(J2, "bob", &need4)).unwrap();
    assert_eq!(s.take_started(), [J1]);
    assert_eq!(s.a.job_phase(J2), Some(Phase::Waiting));
    assert_eq!(s.a.queued_ahead(J2), Some(0));
    // Nothing partial: the waiting job holds none of the two idle slots.
    assert_eq!((held(&s, J1), held(&s, J2)), (4, 0));
    s.step(|a| a.on_master_running(J1));
    s.quiet();
    s.step(|a| a.on_job_ended(J1));
    s.log
        .retain(|e| !matches!(e, Effect::Released { job: J1, .. }));
    assert_eq!(s.take_started(), [J2]);
    assert_eq!(held(&s, J2), 4);
    s.quiet();
}

#[test]
fn a_job_starts_at_its_minimum_and_grows_once_its_master_runs() {
    let mut s = Sim::new();
    pool(&mut s, 6);
    s.step(|a| a.submit_job(J1, "alice", &[limits("w", "Arch == \"X86_64\"", 2, 10)]))
        .unwrap();
    assert_eq!(s.take_started(), [J1]);
    assert_eq!(held(&s, J1), 2);
    s.step(|a| a.add_notify(J1, r(J1, 1), "w"));
    s.expect_done(r(J1, 1));
    s.quiet();
    s.step(|a| a.on_master_running(J1));
    let added = s
        .log
        .drain(..)
        .filter(|e| matches!(e, Effect::Added { request, .. } if *request == r(J1, 1)))
        .count();
    assert_eq!(added, 4, "AddNotify hears of each host above the minimum");
    assert_eq!(held(&s, J1), 6);
    let st = &s.a.class_status(J1)[0];
    assert_eq!((st.held, st.min, st.max), (6, 2, 10));
    // A machine joining later goes to the job too: it is still below its maximum.
    s.machine("late", "Arch = \"X86_64\"", 1);
    assert_eq!(held(&s, J1), 7);
}

#[test]
fn a_later_job_is_not_starved_and_shares_even_out() {
    let mut s = Sim::new();
    pool(&mut s, 6);
    let grow = [limits("w", "true", 1, 6)];
    s.step(|a| a.submit_job(J1, "alice", &grow)).unwrap();
    s.step(|a| a.on_master_running(J1));
    assert_eq!(held(&s, J1), 6);
    s.log.clear();
    // J2's minimum is taken from J1's surplus; then shares even out.
    s.step(|a| a.submit_job(J2, "bob", &grow)).unwrap();
    assert_eq!(s.take_started(), [J2]);
    let preempted = s
        .log
        .iter()
        .filter(|e| {
            matches!(
                e,
                Effect::Released {
                    job: J1,
                    cause: ReleaseCause::Preempted,
                    ..
                }
            )
        })
        .count();
    assert_eq!(preempted, 1);
    s.step(|a| a.on_master_running(J2));
    assert_eq!((held(&s, J1), held(&s, J2)), (3, 3));
}

#[test]
fn minimums_are_matched_even_where_greedy_would_fail() {
    let mut s = Sim::new();
    s.machine("x", "Arch = \"X86_64\"; Mips = 1", 1);
    // The fastest machines are not X86_64: a greedy pass for `any` could take
    // the X86_64 one and leave `x86` without a host.
    s.machine("a", "Arch = \"AARCH64\"; Mips = 900", 1);
    s.step(|a| {
        a.submit_job(
            J1,
            "alice",
            &[
                limits("any", "true", 1, 1),
                limits("x86", "Arch == \"X86_64\"", 1, 1),
            ],
        )
    })
    .unwrap();
    assert_eq!(s.take_started(), [J1]);
    let st = s.a.class_status(J1);
    assert!(st.iter().all(|c| c.held == 1), "{st:?}");
}

#[test]
fn the_waiting_head_keeps_the_slots_it_needs() {
    let mut s = Sim::new();
    pool(&mut s, 4);
    s.step(|a| a.submit_job(J1, "alice", &[limits("w", "true", 3, 3)]))
        .unwrap();
    s.step(|a| a.on_master_running(J1));
    // J2 needs 3: only 1 is idle, J1 has no surplus. J3 wants to grow but the
    // idle slot is kept for J2.
    s.step(|a| a.submit_job(J2, "bob", &[limits("w", "true", 3, 3)]))
        .unwrap();
    s.step(|a| a.submit_job(JobId(3), "carol", &[limits("w", "true", 0, 2)]))
        .unwrap();
    assert_eq!(s.take_started(), [J1]);
    assert_eq!(s.a.queued_ahead(JobId(3)), Some(1));
    let a = &s.a.analyze(J2)[0];
    assert_eq!(
        (a.slots, a.claimed_by_others, a.idle, a.held_by_job),
        (4, 3, 1, 0)
    );
}

#[test]
fn a_bad_submission_creates_nothing() {
    let mut s = Sim::new();
    pool(&mut s, 2);
    let f = s
        .step(|a| a.submit_job(J1, "alice", &[limits("w", "Memory >=", 1, 1)]))
        .unwrap_err();
    assert_eq!(f.code, FailureCode::BadExpression);
    assert!(!s.a.has_job(J1));
    let f = s.step(|a| a.submit_job(J1, "alice", &[])).unwrap_err();
    assert_eq!(f.code, FailureCode::Invalid);
    assert!(s.a.job_ids().is_empty());
    s.quiet();
}

#[test]
fn a_recovered_running_job_gets_its_minimum_before_the_queue() {
    let mut s = Sim::new();
    // As after a restart: jobs replayed before any machine is back.
    s.step(|a| a.submit_job(J1, "alice", &[limits("w", "true", 2, 3)]))
        .unwrap();
    s.step(|a| a.submit_job(J2, "bob", &[limits("w", "true", 3, 3)]))
        .unwrap();
    s.step(|a| a.recover_running(J1));
    assert_eq!(s.a.queued_ahead(J2), Some(0));
    pool(&mut s, 4);
    assert_eq!(held(&s, J1), 2, "the running job's minimum comes first");
    assert_eq!(s.a.job_phase(J2), Some(Phase::Waiting));
    assert!(s.take_started().is_empty(), "no master is started again");
}

#[test]
fn hosts_given_back_are_not_granted_again() {
    let mut s = Sim::new();
    let hosts = pool(&mut s, 4);
    s.step(|a| a.submit_job(J1, "alice", &[limits("w", "true", 1, 4)]))
        .unwrap();
    s.step(|a| a.on_master_running(J1));
    assert_eq!(held(&s, J1), 4);
    s.log.clear();
    let give_back = s.a.job_hosts(J1)[..2].to_vec();
    s.step(|a| a.del_hosts(J1, r(J1, 7), &give_back));
    assert_eq!(held(&s, J1), 2);
    let st = &s.a.class_status(J1)[0];
    assert_eq!(
        (st.min, st.max),
        (1, 2),
        "the maximum follows what the job gave back"
    );
    assert_eq!(s.a.slot_counts(), (hosts.len(), 2));
}

#[test]
fn rank_picks_machines_before_speed() {
    let mut s = Sim::new();
    // `fast` is the fastest (Mips) but ranks lowest on KFlops.
    s.machine("fast", "Mips = 900; KFlops = 1", 1);
    let fpu = s.machine("fpu", "Mips = 1; KFlops = 900", 1)[0];
    let mid = s.machine("mid", "Mips = 2; KFlops = 500", 1)[0];
    let ranked = |min, max| ClassLimits {
        rank: Some("KFlops".into()),
        ..limits("w", "true", min, max)
    };
    s.step(|a| a.submit_job(J1, "alice", &[ranked(1, 2)]))
        .unwrap();
    assert_eq!(
        s.a.job_hosts(J1),
        [fpu],
        "the minimum goes to the best ranked"
    );
    s.step(|a| a.on_master_running(J1));
    let mut held = s.a.job_hosts(J1);
    held.sort();
    assert_eq!(held, [fpu, mid], "growth takes the next best ranked");
    let bad = ClassLimits {
        rank: Some("KFlops +".into()),
        ..limits("w", "true", 1, 1)
    };
    let f = s.step(|a| a.submit_job(J2, "bob", &[bad])).unwrap_err();
    assert_eq!(f.code, FailureCode::BadExpression);
}

#[test]
fn a_small_job_backfills_only_on_machines_the_waiting_head_cannot_use() {
    const J3: JobId = JobId(3);
    const J4: JobId = JobId(4);
    let mut s = Sim::new();
    pool(&mut s, 2);
    let arm = s.machine("arm0", "Arch = \"AARCH64\"", 1)[0];
    s.machine("arm1", "Arch = \"AARCH64\"", 1);
    // A third X86_64 machine, its owner at work.
    s.machine("m2", "Arch = \"X86_64\"", 1);
    s.step(|a| a.on_slot_state("m2", 0, SlotActivity::Vacated));
    // J1 needs three X86_64 machines of the two available: it waits.
    let x86 = [limits("x", "Arch == \"X86_64\"", 3, 3)];
    s.step(|a| a.submit_job(J1, "alice", &x86)).unwrap();
    assert!(s.take_started().is_empty());
    // J2 could run anywhere; it must not take an X86_64 machine J1 waits
    // for, so it starts on an AARCH64 one.
    s.step(|a| a.submit_job(J2, "bob", &[limits("any", "true", 1, 1)]))
        .unwrap();
    assert_eq!(s.take_started(), [J2]);
    assert_eq!(s.a.queued_ahead(J1), Some(0));
    // J3 needs an X86_64 machine: behind J1 it waits, although one is idle.
    s.step(|a| a.submit_job(J3, "carol", &[limits("x", "Arch == \"X86_64\"", 1, 1)]))
        .unwrap();
    assert!(s.take_started().is_empty());
    assert_eq!(s.a.job_phase(J3), Some(Phase::Waiting));
    // J4 needs both AARCH64 machines, one of which J2 holds: it waits, and
    // when J2 ends it starts; J1 and J3 still wait for X86_64 machines.
    s.step(|a| a.submit_job(J4, "dave", &[limits("a", "Arch == \"AARCH64\"", 2, 2)]))
        .unwrap();
    assert!(s.take_started().is_empty());
    s.step(|a| a.on_job_ended(J2));
    assert_eq!(s.take_started(), [J4]);
    assert!(matches!(s.a.host_state(arm), Some(SlotState::Claimed(c)) if c.job == J4));
    // The third X86_64 machine's owner leaves: the head starts, then J3
    // on a fourth machine.
    s.step(|a| a.on_slot_state("m2", 0, SlotActivity::Available));
    assert_eq!(s.take_started(), [J1]);
    s.machine("m3", "Arch = \"X86_64\"", 1);
    assert_eq!(s.take_started(), [J3]);
}

#[test]
fn a_job_needing_more_slots_than_are_online_waits_without_holding_back_the_queue() {
    let mut s = Sim::new();
    pool(&mut s, 2);
    // Within the per-class limit, far beyond the pool: nothing is built per
    // minimum machine, and the job waits.
    let huge = [limits("any", "true", 100_000, 100_000)];
    s.step(|a| a.submit_job(J1, "mallory", &huge)).unwrap();
    assert_eq!(s.a.job_phase(J1), Some(Phase::Waiting));
    // The job behind it starts on the idle slots the first could never fill.
    s.step(|a| a.submit_job(J2, "bob", &[limits("any", "true", 2, 2)]))
        .unwrap();
    assert_eq!(s.take_started(), [J2]);
    assert_eq!(held(&s, J2), 2);
    assert_eq!(s.a.job_phase(J1), Some(Phase::Waiting));
    s.quiet();
}

#[test]
fn a_machine_count_above_the_limit_is_refused_by_the_allocator_too() {
    let mut s = Sim::new();
    pool(&mut s, 2);
    let err = s
        .step(|a| a.submit_job(J1, "mallory", &[limits("any", "true", 1, u32::MAX)]))
        .unwrap_err();
    assert_eq!(
        err.message,
        "class `any`: machine_count: 4294967295 is above the limit of 100000 machines per class"
    );
    assert!(!s.a.has_job(J1));
}

#[test]
fn outstanding_requests_of_a_job_are_capped_and_ids_checked_in_constant_time() {
    use carmi_proto::limits::MAX_OUTSTANDING_PER_JOB;
    let mut s = Sim::new();
    pool(&mut s, 1);
    s.job_with_class(J1, "w", "Arch == \"NONE\"");
    // Driven without the per-step invariant walk (itself linear in the
    // subscriptions): before the index, the reuse check alone made this loop
    // quadratic, some 5e9 comparisons.
    for i in 0..MAX_OUTSTANDING_PER_JOB as u64 - 1 {
        s.a.add_notify(J1, r(J1, i), "w");
    }
    s.a.add_hosts(J1, r(J1, u64::MAX - 1), "w", 1, 1);
    s.a.take_effects();
    s.a.sanity_check();
    s.step(|a| a.add_notify(J1, r(J1, u64::MAX), "w"));
    let msg = s.expect_failed(r(J1, u64::MAX), FailureCode::Invalid);
    assert_eq!(
        msg,
        "outstanding requests of the job: 100001 requests is above the limit of 100000 requests; cancel some (CancelRequest) first"
    );
    // A reused id is still refused, and cancelling makes room.
    s.step(|a| a.cancel(J1, r(J1, u64::MAX - 2), carmi_proto::ids::RequestId(5)));
    s.expect_failed(r(J1, 5), FailureCode::Cancelled);
    s.expect_done(r(J1, u64::MAX - 2));
    s.step(|a| a.add_notify(J1, r(J1, 6), "w"));
    s.expect_failed(r(J1, 6), FailureCode::Invalid);
    s.step(|a| a.add_notify(J1, r(J1, u64::MAX), "w"));
    s.expect_done(r(J1, u64::MAX));
    s.quiet();
}

#[test]
fn classes_defined_at_run_time_are_capped_like_a_submit_files() {
    use carmi_proto::limits::MAX_CLASSES_PER_JOB;
    let mut s = Sim::new();
    pool(&mut s, 1);
    s.step(|a| a.on_job_created(J1, "alice"));
    for i in 0..MAX_CLASSES_PER_JOB as u64 {
        s.step(|a| a.define_class(J1, r(J1, i), &format!("c{i}"), "true"));
        s.expect_done(r(J1, i));
    }
    s.step(|a| a.define_class(J1, r(J1, 100), "one-more", "true"));
    let msg = s.expect_failed(r(J1, 100), FailureCode::Invalid);
    assert_eq!(
        msg,
        "DefineClass: classes of the job: 65 classes is above the limit of 64 classes; redefine or remove one (RemoveClass)"
    );
    // Redefining one is not a new class.
    s.step(|a| a.define_class(J1, r(J1, 101), "c0", "false"));
    s.expect_done(r(J1, 101));
    s.quiet();
}
