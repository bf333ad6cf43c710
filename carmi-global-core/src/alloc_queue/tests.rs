//! The allocation queues' decisions, without a batch system: demand in,
//! commands out, on a virtual wall clock.

use std::collections::BTreeMap;

use carmi_proto::msg::AllocQueueSpec;

use super::*;

const T0: u64 = 1_000_000;

fn spec(max_hosts: u32, backlog: u32) -> AllocQueueSpec {
    let mut s = AllocQueueSpec::slurm(max_hosts, 600);
    s.backlog = backlog;
    s.idle_timeout_s = 30;
    s.lead_s = Some(60);
    s
}

fn demand(q: u64, hosts: u32) -> BTreeMap<u64, u32> {
    BTreeMap::from([(q, hosts)])
}

fn submits(cmds: &[QueueCommand]) -> Vec<u64> {
    cmds.iter()
        .filter_map(|c| match c {
            QueueCommand::Submit { alloc, .. } => Some(*alloc),
            _ => None,
        })
        .collect()
}

fn cancels(cmds: &[QueueCommand]) -> Vec<String> {
    cmds.iter()
        .filter_map(|c| match c {
            QueueCommand::Cancel { batch_job } => Some(batch_job.clone()),
            _ => None,
        })
        .collect()
}

fn idle(_: &str) -> u32 {
    0
}

/// Every snapshot goes through the journal's encoding and back.
fn round_trip(q: &AllocQueues) {
    let snap = q.snapshot();
    let text = serde_json::to_string(&snap).unwrap();
    let back: Snapshot = serde_json::from_str(&text).unwrap();
    assert_eq!(back, snap);
}

#[test]
fn demand_submits_up_to_the_backlog_and_never_past_max_hosts() {
    let mut q = AllocQueues::new(QueueConfig::default());
    let id = q.add(spec(3, 2)).unwrap().id;
    q.on_tick(T0, &demand(id, 5), idle);
    let cmds = q.take_commands();
    assert_eq!(submits(&cmds), vec![1, 2], "backlog 2");
    // Both accepted and queued: the backlog is full, nothing more.
    q.on_submitted(1, Ok("101".into()), T0);
    q.on_submitted(2, Ok("102".into()), T0);
    q.on_tick(T0 + 2, &demand(id, 5), idle);
    assert!(submits(&q.take_commands()).is_empty());
    // One starts and registers: room in the backlog, but only one host
    // more fits under max_hosts 3.
    q.on_batch_states(&[("101".into(), BatchState::Running)], T0 + 3);
    q.on_pilot_registered(&pilot_name(1, 0), Some(T0 + 600), T0 + 3);
    q.on_tick(T0 + 4, &demand(id, 4), idle);
    assert_eq!(submits(&q.take_commands()), vec![3]);
    q.on_submitted(3, Ok("103".into()), T0 + 4);
    q.on_tick(T0 + 6, &demand(id, 4), idle);
    assert!(submits(&q.take_commands()).is_empty(), "3 hosts is the max");
    round_trip(&q);
}

#[test]
fn allocations_on_their_way_count_against_the_demand() {
    let mut q = AllocQueues::new(QueueConfig::default());
    let id = q.add(spec(10, 10)).unwrap().id;
    q.on_tick(T0, &demand(id, 2), idle);
    assert_eq!(submits(&q.take_commands()).len(), 2);
    // The same demand again: two are coming, none more.
    q.on_tick(T0 + 2, &demand(id, 2), idle);
    assert!(submits(&q.take_commands()).is_empty());
}

#[test]
fn failures_in_a_row_pause_the_queue_with_the_batch_systems_message() {
    let mut q = AllocQueues::new(QueueConfig::default());
    let mut s = spec(5, 1);
    s.max_failures = 2;
    let id = q.add(s).unwrap().id;
    q.on_tick(T0, &demand(id, 1), idle);
    q.on_submitted(
        1,
        Err("sbatch: error: invalid partition specified: nosuch".into()),
        T0,
    );
    q.on_tick(T0 + 2, &demand(id, 1), idle);
    let again = submits(&q.take_commands());
    assert_eq!(again, vec![1, 2], "the first failure does not pause");
    q.on_submitted(
        2,
        Err("sbatch: error: invalid partition specified: nosuch".into()),
        T0 + 2,
    );
    let st = q.status(id, true).unwrap();
    assert_eq!(st.state, "paused");
    assert!(
        st.reason.as_deref().unwrap().contains("invalid partition"),
        "{st:?}"
    );
    q.on_tick(T0 + 4, &demand(id, 1), idle);
    assert!(submits(&q.take_commands()).is_empty(), "paused");
    // Resumed: failures forgotten, submitting again.
    q.resume(id).unwrap();
    q.on_tick(T0 + 6, &demand(id, 1), idle);
    assert_eq!(submits(&q.take_commands()), vec![3]);
}

#[test]
fn a_pilot_that_ends_before_registering_is_a_failure_and_registering_resets_the_count() {
    let mut q = AllocQueues::new(QueueConfig::default());
    let id = q.add(spec(5, 1)).unwrap().id;
    q.on_tick(T0, &demand(id, 1), idle);
    q.take_commands();
    q.on_submitted(1, Ok("7".into()), T0);
    q.on_batch_states(&[("7".into(), BatchState::Running)], T0 + 1);
    q.on_batch_states(&[("7".into(), BatchState::Gone("FAILED".into()))], T0 + 2);
    assert_eq!(q.status(id, true).unwrap().failures, 1);
    q.on_tick(T0 + 4, &demand(id, 1), idle);
    assert_eq!(submits(&q.take_commands()), vec![2]);
    q.on_submitted(2, Ok("8".into()), T0 + 4);
    q.on_pilot_registered(&pilot_name(2, 0), Some(T0 + 600), T0 + 5);
    assert_eq!(q.status(id, true).unwrap().failures, 0);
}

#[test]
fn an_idle_pilot_is_cancelled_after_the_idle_timeout_and_a_busy_one_is_not() {
    let mut q = AllocQueues::new(QueueConfig::default());
    let id = q.add(spec(5, 1)).unwrap().id;
    q.on_tick(T0, &demand(id, 1), idle);
    q.on_submitted(1, Ok("7".into()), T0);
    let name = pilot_name(1, 0);
    q.on_pilot_registered(&name, Some(T0 + 600), T0 + 1);
    q.take_commands();
    let busy = |m: &str| u32::from(m == pilot_name(1, 0));
    q.on_tick(T0 + 100, &demand(id, 0), busy);
    assert!(cancels(&q.take_commands()).is_empty(), "busy");
    q.on_tick(T0 + 110, &demand(id, 0), idle);
    assert!(cancels(&q.take_commands()).is_empty(), "idle for 0 s");
    q.on_tick(T0 + 140, &demand(id, 0), idle);
    assert_eq!(cancels(&q.take_commands()), vec!["7".to_string()]);
    q.on_batch_states(&[("7".into(), BatchState::Gone(String::new()))], T0 + 142);
    assert_eq!(q.status(id, true).unwrap().allocations[0].state, "ended");
    assert_eq!(q.status(id, true).unwrap().failures, 0, "not a failure");
}

#[test]
fn a_busy_pilot_near_its_end_asks_for_its_replacement_early() {
    let mut q = AllocQueues::new(QueueConfig::default());
    let id = q.add(spec(2, 1)).unwrap().id;
    q.on_tick(T0, &demand(id, 1), idle);
    q.on_submitted(1, Ok("7".into()), T0);
    q.on_pilot_registered(&pilot_name(1, 0), Some(T0 + 600), T0 + 1);
    q.take_commands();
    let busy = |_: &str| 1;
    // Far from the end: the pilot serves the job, no demand left.
    q.on_tick(T0 + 100, &demand(id, 0), busy);
    assert!(submits(&q.take_commands()).is_empty());
    // Within lead (60) + margin (30) of its end: a replacement.
    q.on_tick(T0 + 600 - 89, &demand(id, 0), busy);
    assert_eq!(submits(&q.take_commands()), vec![2]);
}

#[test]
fn removing_a_queue_cancels_what_waits_and_ends_idle_pilots_at_once() {
    let mut q = AllocQueues::new(QueueConfig::default());
    let id = q.add(spec(5, 2)).unwrap().id;
    q.on_tick(T0, &demand(id, 2), idle);
    q.on_submitted(1, Ok("7".into()), T0);
    q.on_submitted(2, Ok("8".into()), T0);
    q.on_pilot_registered(&pilot_name(1, 0), Some(T0 + 600), T0 + 1);
    q.take_commands();
    q.remove(id).unwrap();
    assert_eq!(
        cancels(&q.take_commands()),
        vec!["8".to_string()],
        "the queued one"
    );
    q.on_tick(T0 + 2, &demand(id, 5), idle);
    let cmds = q.take_commands();
    assert_eq!(
        cancels(&cmds),
        vec!["7".to_string()],
        "idle pilot of a removed queue"
    );
    assert!(submits(&cmds).is_empty());
    q.on_batch_states(
        &[
            ("7".into(), BatchState::Gone(String::new())),
            ("8".into(), BatchState::Gone(String::new())),
        ],
        T0 + 3,
    );
    q.on_tick(T0 + 4, &demand(id, 5), idle);
    assert!(q.list().is_empty(), "gone once its allocations are");
}

#[test]
fn a_restart_keeps_queues_and_running_pilots_and_fails_unanswered_submissions() {
    let mut q = AllocQueues::new(QueueConfig::default());
    let id = q.add(spec(5, 2)).unwrap().id;
    q.on_tick(T0, &demand(id, 2), idle);
    q.on_submitted(1, Ok("7".into()), T0);
    q.on_pilot_registered(&pilot_name(1, 0), Some(T0 + 600), T0 + 1);
    let snap: Snapshot =
        serde_json::from_str(&serde_json::to_string(&q.snapshot()).unwrap()).unwrap();
    let mut r = AllocQueues::new(QueueConfig::default());
    r.restore(snap);
    let st = r.status(id, true).unwrap();
    assert_eq!(st.allocations[0].state, "registered");
    assert_eq!(st.allocations[0].batch_job.as_deref(), Some("7"));
    assert_eq!(
        st.allocations[1].state, "failed",
        "its sbatch answer was lost"
    );
    // Its pilot not back yet: not idle, not cancelled.
    r.on_tick(T0 + 500, &demand(id, 0), idle);
    assert!(cancels(&r.take_commands()).is_empty());
    // The pilot reconnects; ids go on from where they were.
    r.on_pilot_registered(&pilot_name(1, 0), Some(T0 + 600), T0 + 10);
    assert_eq!(
        r.status(id, true).unwrap().allocations[0].machines,
        vec![pilot_name(1, 0)]
    );
    assert_eq!(r.add(spec(1, 1)).unwrap().id, id + 1);
}

#[test]
fn pilot_names_give_back_their_allocation() {
    assert_eq!(alloc_of(&pilot_name(12, 3)), Some(12));
    assert_eq!(alloc_of("m0"), None);
    assert_eq!(alloc_of("pilot-ax-1"), None);
}

#[test]
fn bad_specifications_are_refused_with_the_reason() {
    let mut q = AllocQueues::new(QueueConfig::default());
    let mut s = spec(1, 1);
    s.time_limit_s = 30;
    assert!(q.add(s).unwrap_err().contains("one minute"));
    let mut s = spec(1, 1);
    s.hosts_per_alloc = 2;
    assert!(q.add(s).unwrap_err().contains("--hosts-per-alloc"));
    let mut s = spec(1, 1);
    s.backend = "pbs".into();
    assert!(q.add(s).unwrap_err().contains("unknown backend"));
}

#[test]
fn an_idle_replacement_stands_by_and_is_not_replaced_again() {
    let mut q = AllocQueues::new(QueueConfig::default());
    let id = q.add(spec(3, 1)).unwrap().id;
    q.on_tick(T0, &demand(id, 1), idle);
    q.on_submitted(1, Ok("7".into()), T0);
    q.on_pilot_registered(&pilot_name(1, 0), Some(T0 + 600), T0 + 1);
    q.take_commands();
    let first_busy = |m: &str| u32::from(m == pilot_name(1, 0));
    q.on_tick(T0 + 520, &demand(id, 0), first_busy);
    assert_eq!(submits(&q.take_commands()), vec![2]);
    q.on_submitted(2, Ok("8".into()), T0 + 520);
    q.on_pilot_registered(&pilot_name(2, 0), Some(T0 + 1120), T0 + 522);
    // The replacement is idle: no third pilot, and it is kept past the
    // idle timeout while the first one is busy near its end.
    q.on_tick(T0 + 560, &demand(id, 0), first_busy);
    let cmds = q.take_commands();
    assert!(submits(&cmds).is_empty(), "{cmds:?}");
    assert!(cancels(&cmds).is_empty(), "{cmds:?}");
}
