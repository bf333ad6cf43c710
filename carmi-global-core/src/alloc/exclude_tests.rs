//! `ExcludeHosts`: machines a job left out of a class are never granted to
//! it for that class again, by `AddHosts` or by growth.

use carmi_proto::msg::{FailureCode, Reply};

use super::tests::{Sim, r};
use super::*;

const J1: JobId = JobId(1);
const J2: JobId = JobId(2);

/// Gives `host` back and consumes what that causes.
fn give_back(s: &mut Sim, req: ReqRef, host: HostId) {
    s.step(|a| a.del_hosts(J1, req, &[host]));
    assert!(matches!(s.next(), Effect::Released { host: h, .. } if h == host));
    s.expect_done(req);
}

#[test]
fn an_excluded_machine_is_never_granted_to_the_class_again() {
    let mut s = Sim::new();
    let fast = s.machine("fast", "Mips = 900", 2);
    let slow = s.fast("slow", 100);
    s.job_with_class(J1, "c", "Mips > 0");
    s.step(|a| a.add_hosts(J1, r(J1, 1), "c", 1, 1));
    assert_eq!(s.expect_grant(r(J1, 1), 0), vec![fast[0]]);

    s.step(|a| a.exclude_hosts(J1, r(J1, 2), "c", &[fast[0]]));
    assert_eq!(s.expect_done(r(J1, 2)), Reply::Ok);
    assert_eq!(s.a.job_hosts(J1), [fast[0]], "a held host stays");
    give_back(&mut s, r(J1, 3), fast[0]);

    // Both slots of `fast` are idle and faster, yet only `slow` comes.
    s.step(|a| a.add_hosts(J1, r(J1, 4), "c", 2, 1));
    assert_eq!(s.expect_grant(r(J1, 4), 1), vec![slow]);
    s.quiet();
    // A redefinition keeps the exclusion.
    s.step(|a| a.define_class(J1, r(J1, 5), "c", "Mips > 1"));
    s.expect_done(r(J1, 5));
    s.quiet();

    // Another class of the job, and another job, may still have it.
    s.step(|a| a.define_class(J1, r(J1, 6), "d", "true"));
    s.expect_done(r(J1, 6));
    s.step(|a| a.add_hosts(J1, r(J1, 7), "d", 1, 1));
    assert_eq!(s.expect_grant(r(J1, 7), 0), vec![fast[0]]);
    s.job_with_class(J2, "c", "true");
    s.step(|a| a.add_hosts(J2, r(J2, 1), "c", 1, 1));
    assert_eq!(s.expect_grant(r(J2, 1), 0), vec![fast[1]]);

    // The class's pending request gets a new machine, not the excluded one.
    give_back(&mut s, r(J1, 8), fast[0]);
    s.quiet();
    let new = s.fast("new", 50);
    assert_eq!(s.expect_grant(r(J1, 4), 0), vec![new]);

    s.step(|a| a.class_definitions(J1, r(J1, 9)));
    let Reply::Classes(defs) = s.expect_done(r(J1, 9)) else {
        panic!("GetClassDefinitions answers with Classes");
    };
    let c = defs.iter().find(|d| d.name == "c").expect("class c");
    assert_eq!(c.excluded, ["fast"]);
    assert!(
        defs.iter()
            .find(|d| d.name == "d")
            .unwrap()
            .excluded
            .is_empty()
    );
}

#[test]
fn a_host_claimed_for_an_unannounced_group_is_let_go() {
    let mut s = Sim::new();
    let fast = s.fast("fast", 900);
    s.job_with_class(J1, "c", "true");
    // A group of two with one machine: `fast` is claimed but not announced.
    s.step(|a| a.add_hosts(J1, r(J1, 1), "c", 2, 2));
    s.quiet();
    s.step(|a| a.exclude_hosts(J1, r(J1, 2), "c", &[fast]));
    s.expect_done(r(J1, 2));
    s.quiet();
    assert_eq!(s.a.host_state(fast), Some(&SlotState::Idle));
    let a = s.fast("a", 10);
    s.quiet();
    let b = s.fast("b", 20);
    let mut got = s.expect_grant(r(J1, 1), 0);
    got.sort();
    assert_eq!(got, [a, b]);
}

#[test]
fn growth_of_a_submitted_job_skips_excluded_machines() {
    let mut s = Sim::new();
    let fast = s.fast("fast", 900);
    let slow = s.fast("slow", 100);
    let class = ClassLimits {
        name: "w".into(),
        expression: "true".into(),
        min: 1,
        max: 2,
        rank: None,
    };
    s.step(|a| a.submit_job(J1, "alice", &[class])).unwrap();
    assert_eq!(s.a.job_hosts(J1), [fast]);
    s.log.clear();
    s.step(|a| a.exclude_hosts(J1, r(J1, 1), "w", &[slow]));
    s.expect_done(r(J1, 1));
    s.step(|a| a.on_master_running(J1));
    assert_eq!(s.a.job_hosts(J1), [fast], "growth does not take `slow`");
    assert_eq!(s.a.host_state(slow), Some(&SlotState::Idle));
}

#[test]
fn bad_exclusions_are_refused_with_a_reason() {
    let mut s = Sim::new();
    let h = s.fast("m", 10);
    s.job_with_class(J1, "c", "true");
    s.step(|a| a.exclude_hosts(J1, r(J1, 1), "nosuch", &[h]));
    s.expect_failed(r(J1, 1), FailureCode::UnknownClass);
    s.step(|a| a.exclude_hosts(J1, r(J1, 2), "c", &[]));
    s.expect_failed(r(J1, 2), FailureCode::Invalid);
    s.step(|a| a.exclude_hosts(J1, r(J1, 3), "c", &[HostId(99)]));
    let msg = s.expect_failed(r(J1, 3), FailureCode::NotYourHost);
    assert!(msg.contains("99"), "{msg}");
    s.quiet();
}
