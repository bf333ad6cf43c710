//! Fair share between users, driven by `now`: a user's number of jobs does
//! not buy more of the pool, and recent use lowers a user's share.

use super::tests::Sim;
use super::*;

/// `n` one-slot machines.
fn pool(s: &mut Sim, n: u32) {
    for i in 0..n {
        s.machine(&format!("m{i}"), &format!("Mips = {}", 100 + i), 1);
    }
}

/// Submits a job of `owner` wanting 1 to `max` hosts of anything, its master running.
fn job(s: &mut Sim, id: u64, owner: &str, max: u32) -> JobId {
    let job = JobId(id);
    let class = ClassLimits {
        name: "any".into(),
        expression: "true".into(),
        min: 1,
        max,
        rank: None,
    };
    s.step(|a| a.submit_job(job, owner, &[class])).unwrap();
    s.step(|a| a.on_master_running(job));
    s.log.clear();
    job
}

fn held(s: &Sim, jobs: &[JobId]) -> u32 {
    jobs.iter()
        .map(|&j| s.a.class_status(j).iter().map(|c| c.held).sum::<u32>())
        .sum()
}

#[test]
fn a_user_with_one_job_gets_half_the_pool_beside_a_user_with_ten() {
    let mut s = Sim::new();
    pool(&mut s, 20);
    let a: Vec<JobId> = (1..=10).map(|i| job(&mut s, i, "alice", 20)).collect();
    assert_eq!(held(&s, &a), 20, "alice alone takes the whole pool");
    s.sleep(1000);
    let b = [job(&mut s, 11, "bob", 20)];
    // Per job, bob would hold 20/11: one or two hosts. Per user he holds
    // half; alice's ten jobs keep their minimums and share the rest.
    assert_eq!(held(&s, &b), 10);
    assert_eq!(held(&s, &a), 10);
    for &j in &a {
        assert_eq!(held(&s, &[j]), 1, "alice's jobs share her half evenly");
    }
}

#[test]
fn recent_use_lowers_a_users_share_and_decays_away() {
    let mut s = Sim::new();
    s.a.set_usage_half_life(Duration::from_secs(3600));
    pool(&mut s, 12);
    // Alice holds 12 hosts for two hours: decayed with a one-hour
    // half-life that is about 13 host-hours, a priority of about 14.
    let a = [job(&mut s, 1, "alice", 12)];
    for _ in 0..120 {
        s.sleep(60_000);
        s.step(|_| ());
    }
    let pa = s.a.usage().priority("alice");
    assert!(
        pa > 10.0,
        "alice's priority after two hours of 12 hosts: {pa}"
    );
    let b = [job(&mut s, 2, "bob", 12)];
    // Bob, who used nothing, is owed more than half.
    let (ha, hb) = (held(&s, &a), held(&s, &b));
    assert_eq!(ha + hb, 12);
    assert!(
        hb >= 10,
        "bob holds {hb}, alice {ha} (priorities {pa} and 1)"
    );
    // Alice's usage halves every half-life once she holds little.
    let before = s.a.user_usage("alice").host_seconds;
    s.sleep(3_600_000);
    s.step(|_| ());
    let after = s.a.user_usage("alice").host_seconds;
    assert!(after < before, "{before} -> {after}");
}

#[test]
fn one_user_alone_keeps_the_per_job_rule() {
    let mut s = Sim::new();
    pool(&mut s, 6);
    let j1 = job(&mut s, 1, "alice", 6);
    let j2 = job(&mut s, 2, "alice", 6);
    assert_eq!((held(&s, &[j1]), held(&s, &[j2])), (3, 3));
}
