//! Held jobs in the allocator: everything given back, the place in the
//! queue kept, the submit file's classes restored on release.

use super::tests::{Sim, r};
use super::*;

const J1: JobId = JobId(1);
const J2: JobId = JobId(2);

fn any(min: u32, max: u32) -> Vec<ClassLimits> {
    vec![ClassLimits {
        name: "any".into(),
        expression: "true".into(),
        min,
        max,
        rank: None,
    }]
}

fn held(s: &Sim, job: JobId) -> u32 {
    s.a.class_status(job).iter().map(|c| c.held).sum()
}

#[test]
fn a_held_job_returns_every_host_and_restarts_from_its_submit_file() {
    let mut s = Sim::new();
    let hosts: Vec<HostId> = (0..4)
        .flat_map(|i| s.machine(&format!("m{i}"), "Arch = \"X86_64\"", 1))
        .collect();
    s.step(|a| a.submit_job(J1, "alice", &any(1, 3))).unwrap();
    s.step(|a| a.on_master_running(J1));
    assert_eq!(held(&s, J1), 3);
    // The job gives a host back (lowering its maximum), another is
    // suspended by its owner, and it asks for more.
    let mine = s.a.job_hosts(J1);
    s.step(|a| a.del_hosts(J1, r(J1, 1), &mine[..1]));
    let (name, slot) = {
        let (n, i) = s.a.host_location(mine[1]).unwrap();
        (n.to_string(), i)
    };
    s.step(|a| a.on_slot_state(&name, slot, carmi_proto::msg::SlotActivity::Suspended));
    s.step(|a| a.add_hosts(J1, r(J1, 2), "any", 5, 1));
    s.log.clear();

    s.step(|a| a.hold_job(J1)).unwrap();
    s.a.sanity_check();
    assert_eq!(s.a.job_phase(J1), Some(Phase::Held));
    assert_eq!(held(&s, J1), 0);
    assert_eq!(s.a.pending_requests(), 0);
    // Every slot not suspended by its owner is idle again.
    assert_eq!(s.a.slot_counts(), (4, 3));
    assert!(
        s.a.take_host_changes()
            .iter()
            .any(|c| c.job == J1 && c.kind == HostChangeKind::Removed(ReleaseCause::Held))
    );
    // A request still in flight is refused; a second hold too.
    s.log.clear();
    s.step(|a| a.add_hosts(J1, r(J1, 3), "any", 1, 1));
    assert!(
        matches!(s.log.front(), Some(Effect::Failed { .. })),
        "{:?}",
        s.log
    );
    assert!(s.step(|a| a.hold_job(J1)).is_err());
    assert_eq!(held(&s, J1), 0);

    // Released: it starts again with its submit file's maximum (3), not the
    // one its DelHosts lowered.
    assert!(s.step(|a| a.release_job(J2, &any(1, 1))).is_err());
    s.step(|a| a.release_job(J1, &any(1, 3))).unwrap();
    s.a.sanity_check();
    assert!(matches!(
        s.a.job_phase(J1),
        Some(Phase::Running { grow: false })
    ));
    s.step(|a| a.on_master_running(J1));
    assert_eq!(held(&s, J1), 3);
    assert!(hosts.len() == 4);
}

#[test]
fn only_a_submitted_job_in_the_queue_can_be_held() {
    let mut s = Sim::new();
    s.machine("m0", "Arch = \"X86_64\"", 1);
    s.step(|a| a.on_job_created(J2, "m0"));
    let by_hand = s.step(|a| a.hold_job(J2)).unwrap_err();
    assert!(by_hand.message.contains("started by hand"), "{by_hand:?}");
    let unknown = s.step(|a| a.hold_job(J1)).unwrap_err();
    assert!(unknown.message.contains("not in the queue"), "{unknown:?}");
    let not_held = s.step(|a| a.release_job(J2, &any(1, 1))).unwrap_err();
    assert!(
        not_held.message.contains("is not held (it is attached)"),
        "{not_held:?}"
    );
}
