//! The core and the real owner policy together, in virtual time.

use bytes::Bytes;
use carmi_proto::ids::{HostId, ProcessId};
use carmi_proto::msg::{FromGlobal, SlotActivity, ToGlobal};
use classad::ClassAd;

use super::super::Effect;
use super::*;
use crate::policy::{Observation, PolicyConfig};

const MIN: f64 = 60.0;

fn owner(policy: &mut Policy, idle: f64) {
    policy.observe(Observation {
        keyboard_idle: idle,
        load_avg: 0.0,
        non_pool_load: 0.0,
    });
}

fn registered_with_one_process() -> Core {
    let mut core = Core::new(1);
    core.on_global_connected("[ Name = \"m\" ]".into());
    core.on_global(
        FromGlobal::Registered {
            hosts: vec![HostId(100)],
            heartbeat_ms: 1000,
        },
        Bytes::new(),
    );
    core.on_global(crate::pair_tests::spawn(1, 100), Bytes::new());
    core.on_launched(ProcessId(1), Ok(()));
    core.take_effects();
    core
}

#[test]
fn the_owners_return_suspends_and_a_long_stay_vacates_then_kills() {
    let mut core = registered_with_one_process();
    let mut policy = Policy::new(PolicyConfig::default(), 0.0);
    let base = ClassAd::new();
    owner(&mut policy, 1e6);
    assert!(core.policy_stale(), "a process arrived since no step");
    core.step_policy(&mut policy, 0.0, &base);
    assert!(!core.policy_stale());
    assert!(core.is_accepting());
    assert!(
        core.take_effects()
            .iter()
            .all(|e| !matches!(e, Effect::Suspend(_)))
    );

    // The owner is back: the process stops and the slot says so.
    owner(&mut policy, 0.0);
    core.step_policy(&mut policy, 1.0, &base);
    let e = core.take_effects();
    assert!(e.contains(&Effect::Suspend(ProcessId(1))), "{e:?}");
    assert!(e.iter().any(|e| matches!(
        e,
        Effect::ToGlobal(
            ToGlobal::SlotState {
                state: SlotActivity::Suspended,
                ..
            },
            _
        )
    )));
    assert!(!core.is_accepting());

    // Ten policy minutes later: vacated (SIGTERM), then SIGKILL after the
    // vacate grace, each at a deadline the policy names.
    let mut now = 1.0;
    let mut seen = Vec::new();
    while now < 11.0 * MIN {
        owner(&mut policy, 0.0);
        now = core.step_policy(&mut policy, now, &base).max(now + 0.5);
        seen.extend(core.take_effects());
    }
    let terminate = seen
        .iter()
        .position(|e| *e == Effect::Terminate(ProcessId(1)));
    let kill = seen
        .iter()
        .position(|e| *e == Effect::KillNow(ProcessId(1)));
    assert!(
        terminate.is_some() && kill.is_some() && terminate < kill,
        "{seen:?}"
    );
    core.sanity_check();
}

#[test]
fn the_policy_is_due_at_the_deadline_it_named_and_when_processes_change() {
    let mut core = registered_with_one_process();
    let mut policy = Policy::new(PolicyConfig::default(), 0.0);
    let base = ClassAd::new();
    owner(&mut policy, 1e6);
    assert_eq!(core.policy_due(), Some(PolicyDue::JobsChanged));
    let next = core.step_policy(&mut policy, 0.0, &base);
    assert!(next > 0.0, "the policy names a later step");
    assert_eq!(core.policy_due(), None);
    // The policy's next step is one of the core's deadlines.
    assert!(core.next_deadline().is_some_and(|d| d <= next));
    core.on_time(next - 0.001);
    assert_eq!(core.policy_due(), None);
    core.on_time(next);
    assert_eq!(core.policy_due(), Some(PolicyDue::Deadline));
    let again = core.step_policy(&mut policy, next, &base);
    assert!(again > next);
    assert_eq!(core.policy_due(), None);
    // The process leaves: the policy is due at once.
    core.on_exited(ProcessId(1), carmi_proto::msg::ExitStatus::Code(0), 0.0);
    assert_eq!(core.policy_due(), Some(PolicyDue::JobsChanged));
}

#[test]
fn the_metrics_count_slots_processes_and_the_policy_s_effects() {
    let mut core = registered_with_one_process();
    let m = core.metrics();
    assert_eq!(m.slots[..2], [("idle", 0), ("busy", 1)]);
    assert_eq!(
        m.processes,
        [("fetching", 0), ("launching", 0), ("running", 1)]
    );
    assert!(m.registered);
    assert_eq!(m.counters.policy_effects, [0; 6]);

    let mut policy = Policy::new(PolicyConfig::default(), 0.0);
    let base = ClassAd::new();
    owner(&mut policy, 1e6);
    core.step_policy(&mut policy, 0.0, &base);
    owner(&mut policy, 0.0);
    core.step_policy(&mut policy, 1.0, &base);
    let m = core.metrics();
    assert_eq!(m.slots[1..3], [("busy", 0), ("suspended", 1)]);
    let suspend = crate::metrics::effect_index(crate::policy::PolicyEffect::Suspend);
    assert_eq!(m.counters.policy_effects[suspend], 1);
    assert_eq!(m.counters.policy_effects.iter().sum::<u64>(), 1);

    core.on_exited(ProcessId(1), carmi_proto::msg::ExitStatus::Code(0), 0.0);
    let m = core.metrics();
    assert_eq!(m.processes[2], ("running", 0));
    assert_eq!(m.counters.processes_exited, 1);
}
