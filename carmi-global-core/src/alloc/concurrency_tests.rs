//! Concurrency limits and accounting groups, driven through the allocator's
//! inputs as the router gives them: a submit and the job's attributes in one
//! input, then ends, holds and releases.

use super::tests::Sim;
use super::*;

/// `n` one-slot machines.
fn pool(s: &mut Sim, n: u32) {
    for i in 0..n {
        s.machine(&format!("m{i}"), &format!("Mips = {}", 100 + i), 1);
    }
}

fn class(min: u32, max: u32) -> ClassLimits {
    ClassLimits {
        name: "any".into(),
        expression: "true".into(),
        min,
        max,
        rank: None,
    }
}

/// Submits job `id` of `owner` wanting `min..max` hosts of anything, with
/// `attrs` (name, ClassAd expression text) set in the same input, as the
/// router does at a submit; its master runs.
fn submit(s: &mut Sim, id: u64, owner: &str, (min, max): (u32, u32), attrs: &[(&str, &str)]) {
    let job = JobId(id);
    let attrs: Vec<(String, String)> = attrs
        .iter()
        .map(|(n, v)| (n.to_string(), v.to_string()))
        .collect();
    s.step(|a| {
        a.submit_job(job, owner, &[class(min, max)])?;
        a.set_job_attributes(job, &attrs);
        Ok::<_, carmi_proto::msg::Failure>(())
    })
    .unwrap();
    s.step(|a| a.on_master_running(job));
}

fn limits(pairs: &[(&str, f64)], default: Option<f64>) -> ConcurrencyConfig {
    ConcurrencyConfig {
        limits: pairs.iter().map(|&(n, v)| (n.to_string(), v)).collect(),
        default,
    }
}

fn phase(s: &Sim, id: u64) -> Phase {
    s.a.job_phase(JobId(id)).expect("the job exists")
}

fn running(s: &Sim, id: u64) -> bool {
    matches!(phase(s, id), Phase::Running { .. })
}

fn held(s: &Sim, id: u64) -> u32 {
    s.a.class_status(JobId(id)).iter().map(|c| c.held).sum()
}

#[test]
fn a_limit_of_one_runs_one_job_and_the_next_starts_when_it_ends() {
    let mut s = Sim::new();
    s.a.set_concurrency_limits(limits(&[("matlab", 1.0)], None));
    pool(&mut s, 4);
    // Room for both, but one licence; names are case-insensitive.
    submit(
        &mut s,
        1,
        "alice",
        (1, 1),
        &[("ConcurrencyLimits", "\"matlab\"")],
    );
    submit(
        &mut s,
        2,
        "bob",
        (1, 1),
        &[("ConcurrencyLimits", "\"MATLAB\"")],
    );
    assert!(running(&s, 1));
    assert_eq!(phase(&s, 2), Phase::Waiting);
    assert_eq!(s.a.concurrency_in_use("matlab"), 1.0);
    assert_eq!(
        s.a.concurrency_wait(JobId(2)).as_deref(),
        Some("waits for concurrency limit matlab (1 of 1 in use)")
    );
    assert_eq!(s.a.concurrency_wait(JobId(1)), None, "it holds the licence");
    // The waiting job is not impossible: it is not held at submit for it.
    assert_eq!(s.a.impossible(JobId(2)), None);
    s.take_started();
    s.step(|a| a.on_job_ended(JobId(1)));
    assert_eq!(s.take_started(), vec![JobId(2)]);
    assert_eq!(s.a.concurrency_in_use("matlab"), 1.0);
    s.step(|a| a.on_job_ended(JobId(2)));
    assert_eq!(s.a.concurrency_in_use("matlab"), 0.0);
}

#[test]
fn amounts_count_against_the_limit_and_smaller_jobs_pass_a_blocked_one() {
    let mut s = Sim::new();
    s.a.set_concurrency_limits(limits(&[("lic", 3.0)], None));
    pool(&mut s, 6);
    submit(
        &mut s,
        1,
        "alice",
        (1, 1),
        &[("ConcurrencyLimits", "\"lic:2\"")],
    );
    submit(
        &mut s,
        2,
        "alice",
        (1, 1),
        &[("ConcurrencyLimits", "\"lic:2\"")],
    );
    assert!(running(&s, 1));
    assert_eq!(
        s.a.concurrency_wait(JobId(2)).as_deref(),
        Some("waits for concurrency limit lic (2 of 3 in use, it needs 2)")
    );
    // One unit is left: a job taking one starts, past the blocked one.
    submit(
        &mut s,
        3,
        "alice",
        (1, 1),
        &[("ConcurrencyLimits", "\"lic\"")],
    );
    assert!(running(&s, 3));
    assert_eq!(s.a.concurrency_in_use("lic"), 3.0);
    s.step(|a| a.on_job_ended(JobId(1)));
    // 1 of 3 in use: job 2's two fit.
    assert!(running(&s, 2));
    assert_eq!(s.a.concurrency_in_use("lic"), 3.0);
    // A job needing more than the limit itself says it cannot start as is.
    submit(
        &mut s,
        4,
        "alice",
        (1, 1),
        &[("ConcurrencyLimits", "\"lic:4\"")],
    );
    let why = s.a.concurrency_wait(JobId(4)).unwrap();
    assert!(
        why.contains("it needs 4 and the pool's limit is 3"),
        "{why}"
    );
}

#[test]
fn a_job_without_limits_is_not_kept_back_by_one_waiting_for_a_limit() {
    let mut s = Sim::new();
    s.a.set_concurrency_limits(limits(&[("matlab", 1.0)], None));
    pool(&mut s, 3);
    submit(
        &mut s,
        1,
        "alice",
        (1, 1),
        &[("ConcurrencyLimits", "\"matlab\"")],
    );
    // Job 2 would take the whole rest of the pool, but waits for the
    // licence: it keeps no slot from job 3 behind it.
    submit(
        &mut s,
        2,
        "alice",
        (2, 2),
        &[("ConcurrencyLimits", "\"matlab\"")],
    );
    submit(&mut s, 3, "alice", (1, 1), &[]);
    assert_eq!(phase(&s, 2), Phase::Waiting);
    assert!(running(&s, 3), "{:?}", phase(&s, 3));
    assert_eq!(s.a.concurrency_wait(JobId(3)), None);
    // Nor does growth keep slots for it: a growing job takes the idle slot.
    submit(&mut s, 4, "bob", (0, 2), &[]);
    assert_eq!(held(&s, 4), 1);
}

#[test]
fn a_hold_frees_the_limit_and_a_release_waits_for_it_again() {
    let mut s = Sim::new();
    s.a.set_concurrency_limits(limits(&[("db", 1.0)], None));
    pool(&mut s, 2);
    submit(
        &mut s,
        1,
        "alice",
        (1, 1),
        &[("ConcurrencyLimits", "\"db\"")],
    );
    submit(
        &mut s,
        2,
        "alice",
        (1, 1),
        &[("ConcurrencyLimits", "\"db\"")],
    );
    assert!(running(&s, 1));
    s.step(|a| a.hold_job(JobId(1))).unwrap();
    assert!(running(&s, 2), "the held job's licence went to job 2");
    s.step(|a| a.release_job(JobId(1), &[class(1, 1)])).unwrap();
    assert_eq!(phase(&s, 1), Phase::Waiting);
    assert!(
        s.a.concurrency_wait(JobId(1))
            .is_some_and(|w| w.contains("db (1 of 1 in use)"))
    );
}

#[test]
fn the_default_limits_names_the_admin_did_not_list_and_no_default_means_no_limit() {
    let mut s = Sim::new();
    pool(&mut s, 4);
    // No limits configured: any name is unlimited.
    submit(
        &mut s,
        1,
        "alice",
        (1, 1),
        &[("ConcurrencyLimits", "\"x\"")],
    );
    submit(
        &mut s,
        2,
        "alice",
        (1, 1),
        &[("ConcurrencyLimits", "\"x\"")],
    );
    assert!(running(&s, 1) && running(&s, 2));
    // A default of 2 counts the jobs already holding `x`.
    s.step(|a| a.set_concurrency_limits(limits(&[], Some(2.0))));
    submit(
        &mut s,
        3,
        "alice",
        (1, 1),
        &[("ConcurrencyLimits", "\"x\"")],
    );
    assert_eq!(
        s.a.concurrency_wait(JobId(3)).as_deref(),
        Some("waits for concurrency limit x (2 of 2 in use)")
    );
    // Every name must fit: `y` is free, `x` is not.
    submit(
        &mut s,
        4,
        "alice",
        (1, 1),
        &[("ConcurrencyLimits", "\"y, x\"")],
    );
    assert_eq!(phase(&s, 4), Phase::Waiting);
    s.step(|a| a.on_job_ended(JobId(2)));
    // Job 3 came first.
    assert!(running(&s, 3));
    assert_eq!(phase(&s, 4), Phase::Waiting);
}

#[test]
fn a_limit_list_that_cannot_be_read_keeps_the_job_waiting_with_the_reason() {
    let mut s = Sim::new();
    pool(&mut s, 2);
    submit(
        &mut s,
        1,
        "alice",
        (1, 1),
        &[("ConcurrencyLimits", "\"lic:lots\"")],
    );
    assert_eq!(phase(&s, 1), Phase::Waiting);
    let why = s.a.concurrency_wait(JobId(1)).unwrap();
    assert!(
        why.contains("the amount `lots` is not a positive number"),
        "{why}"
    );
    submit(&mut s, 2, "alice", (1, 1), &[("ConcurrencyLimits", "3")]);
    assert!(
        s.a.concurrency_wait(JobId(2))
            .unwrap()
            .contains("not a string")
    );
    // The jobs behind them are not kept waiting.
    submit(&mut s, 3, "alice", (1, 1), &[]);
    assert!(running(&s, 3));
}

#[test]
fn limit_lists_parse_as_htcondor_writes_them() {
    assert_eq!(
        parse_concurrency_limits("licA, LicB:2 ,sw.a:0.5").unwrap(),
        vec![
            ("lica".to_string(), 1.0),
            ("licb".to_string(), 2.0),
            ("sw.a".to_string(), 0.5)
        ]
    );
    assert_eq!(parse_concurrency_limits("").unwrap(), vec![]);
    assert_eq!(
        parse_concurrency_limits("a,A:2").unwrap(),
        vec![("a".to_string(), 3.0)]
    );
    for bad in ["a:0", "a:-1", ":2", "a b", "a:x"] {
        assert!(parse_concurrency_limits(bad).is_err(), "{bad}");
    }
}

#[test]
fn an_accounting_group_is_the_user_the_fair_share_charges() {
    let mut s = Sim::new();
    pool(&mut s, 20);
    // Alice's two jobs charged to physics.alice (AcctGroup with her as the
    // group's user), one to herself: two users, each owed half the pool,
    // where three jobs of one user would share it by thirds.
    let group = [("AcctGroup", "\"physics\"")];
    submit(&mut s, 1, "alice", (1, 20), &group);
    submit(&mut s, 2, "alice", (1, 20), &group);
    submit(&mut s, 3, "alice", (1, 20), &[]);
    assert_eq!(s.a.job_user(JobId(1)), "physics.alice");
    assert_eq!(s.a.job_user(JobId(3)), "alice");
    assert_eq!(s.a.job_owner(JobId(1)), "alice", "the owner stays");
    assert_eq!(held(&s, 1) + held(&s, 2), 10);
    assert_eq!(held(&s, 3), 10);
    // Usage is charged to the group's user.
    s.sleep(2000);
    s.step(|_| ());
    let names: Vec<&str> = s.a.usage().users().map(|(n, _)| n).collect();
    assert_eq!(names, ["alice", "physics.alice"]);
    assert!(s.a.user_usage("physics.alice").host_seconds > 15.0);
}

#[test]
fn accounting_group_spellings_and_names_passed_over() {
    let mut s = Sim::new();
    pool(&mut s, 1);
    let cases: [(&[(&str, &str)], &str); 5] = [
        (&[("AccountingGroup", "\"cms.prod\"")], "cms.prod"),
        (
            &[("AcctGroup", "\"cms\""), ("AcctGroupUser", "\"bob\"")],
            "cms.bob",
        ),
        // AccountingGroup wins over the pieces, as condor_submit sets it from them.
        (
            &[
                ("AcctGroup", "\"cms\""),
                ("AccountingGroup", "\"atlas.alice\""),
            ],
            "atlas.alice",
        ),
        (&[("AccountingGroup", "\"has space\"")], "alice"),
        (&[("AccountingGroup", "\"\"")], "alice"),
    ];
    for (i, (attrs, user)) in cases.into_iter().enumerate() {
        submit(&mut s, 10 + i as u64, "alice", (1, 1), attrs);
        assert_eq!(s.a.job_user(JobId(10 + i as u64)), user, "{attrs:?}");
    }
}
