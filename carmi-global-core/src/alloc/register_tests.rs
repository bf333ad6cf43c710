//! A machine that registers again under its name (its local RM restarted,
//! or reconnected) starts from what it now reports, not from what the
//! allocator remembered of its owner.

use carmi_proto::msg::SlotActivity;

use super::tests::{Sim, r};
use super::*;

const J1: JobId = JobId(1);

#[test]
fn a_machine_registering_again_leaves_its_owners_state_behind() {
    let mut s = Sim::new();
    let hosts = s.machine("m", "Mips = 5", 3);
    s.step(|a| a.on_slot_state("m", 0, SlotActivity::Vacated));
    s.step(|a| a.on_slot_state("m", 1, SlotActivity::Suspended));
    assert_eq!(s.a.host_state(hosts[0]), Some(&SlotState::Owner));
    assert_eq!(s.a.host_state(hosts[1]), Some(&SlotState::Suspended(None)));
    s.quiet();

    // Restarted with another owner policy: it registers anew, and reports no
    // slot as taken (it would send a SlotState for each one that is).
    let again = s.machine("m", "Mips = 5", 3);
    assert_eq!(again, hosts, "the same host ids");
    for h in &hosts {
        assert_eq!(s.a.host_state(*h), Some(&SlotState::Idle), "{h}");
    }
    assert!(
        s.a.pool_status()[0]
            .slots
            .iter()
            .all(|slot| slot.state == "idle"),
        "{:?}",
        s.a.pool_status()
    );
    // And a job can have them.
    s.job_with_class(J1, "c", "true");
    s.step(|a| a.add_hosts(J1, r(J1, 1), "c", 3, 3));
    assert_eq!(s.expect_grant(r(J1, 1), 0).len(), 3);
}

#[test]
fn a_machine_registering_again_keeps_the_claims_of_running_jobs() {
    let mut s = Sim::new();
    s.machine("m", "Mips = 5", 2);
    s.job_with_class(J1, "c", "true");
    s.step(|a| a.add_hosts(J1, r(J1, 1), "c", 1, 1));
    let granted = s.expect_grant(r(J1, 1), 0);
    s.quiet();
    s.step(|a| a.on_slot_state("m", 0, SlotActivity::Suspended));
    s.quiet();
    let suspended = s.a.host_state(granted[0]).cloned();
    assert!(
        matches!(suspended, Some(SlotState::Suspended(Some(_)))),
        "{suspended:?}"
    );
    s.machine("m", "Mips = 5", 2);
    assert_eq!(
        s.a.host_state(granted[0]).cloned(),
        suspended,
        "the claim stays"
    );
}

#[test]
fn analyze_names_the_false_clause_of_an_owners_start() {
    let mut s = Sim::new();
    s.machine(
        "desk7",
        "KeyboardIdle = 32; Start = KeyboardIdle > 900 && true",
        1,
    );
    s.machine("lab", "KeyboardIdle = 5000; Start = KeyboardIdle > 900", 1);
    s.step(|a| a.on_slot_state("desk7", 0, SlotActivity::Vacated));
    s.job_with_class(J1, "c", "true");
    s.quiet();
    let a = &s.a.analyze(J1)[0];
    assert_eq!(a.owner, 1);
    assert_eq!(
        a.owner_reasons,
        [(
            "desk7".to_string(),
            "START is false: KeyboardIdle > 900 (KeyboardIdle = 32)".to_string()
        )]
    );
}
