use carmi_api::ids::{HostId, JobId};
use carmi_api::msg::{JobStatus, MachineStatus, SlotStatus};

use super::*;

fn job(id: u64) -> JobStatus {
    JobStatus {
        job: JobId(id),
        cluster: None,
        proc: 0,
        owner: "alice".into(),
        submitted_unix: 0,
        state: "running".into(),
        executable: String::new(),
        master: None,
        classes: vec![],
        note: None,
        user: None,
        attrs: vec![],
    }
}

/// A machine with one slot per `(host, state, job)`.
fn machine(name: &str, slots: &[(u64, &str, Option<u64>)]) -> std::sync::Arc<MachineStatus> {
    std::sync::Arc::new(MachineStatus {
        name: name.into(),
        attributes: vec![].into(),
        slots: slots
            .iter()
            .map(|&(h, state, j)| SlotStatus {
                host: HostId(h),
                state: state.to_string().into(),
                job: j.map(JobId),
            })
            .collect(),
    })
}

fn snap(machines: Vec<std::sync::Arc<MachineStatus>>, jobs: &[u64]) -> Snapshot {
    Snapshot {
        machines,
        jobs: jobs.iter().map(|&j| job(j)).collect(),
        waiting: vec![],
        counters: Default::default(),
        light: None,
    }
}

fn spans(t: &Timelines, j: u64, host: u64) -> Vec<(SpanKind, u64, Option<u64>)> {
    let row = t
        .get(JobId(j))
        .unwrap()
        .hosts
        .iter()
        .find(|r| r.host == HostId(host));
    row.unwrap()
        .spans
        .iter()
        .map(|s| (s.kind, s.start, s.end))
        .collect()
}

#[test]
fn a_host_held_then_suspended_then_given_back_reads_as_three_spans() {
    use SpanKind::*;
    let mut t = Timelines::default();
    t.update(&snap(vec![machine("m0", &[(1, "idle", None)])], &[7]), 100);
    assert!(t.get(JobId(7)).unwrap().hosts.is_empty());
    t.update(
        &snap(vec![machine("m0", &[(1, "claimed", Some(7))])], &[7]),
        101,
    );
    t.update(
        &snap(vec![machine("m0", &[(1, "claimed", Some(7))])], &[7]),
        102,
    );
    t.update(
        &snap(vec![machine("m0", &[(1, "suspended", Some(7))])], &[7]),
        105,
    );
    t.update(
        &snap(vec![machine("m0", &[(1, "claimed", Some(7))])], &[7]),
        109,
    );
    assert_eq!(
        spans(&t, 7, 1),
        [
            (Held, 101, Some(105)),
            (Suspended, 105, Some(109)),
            (Held, 109, None)
        ]
    );
    // Given back: the machine stays, so nothing was lost.
    t.update(&snap(vec![machine("m0", &[(1, "idle", None)])], &[7]), 112);
    assert_eq!(spans(&t, 7, 1).last(), Some(&(Held, 109, Some(112))));
    assert_eq!(t.get(JobId(7)).unwrap().since, 100);
}

#[test]
fn a_host_whose_machine_vanishes_is_marked_lost_and_comes_back_on_its_row() {
    use SpanKind::*;
    let mut t = Timelines::default();
    let held = || machine("m1", &[(4, "claimed", Some(3)), (5, "claimed", Some(9))]);
    t.update(&snap(vec![held()], &[3, 9]), 10);
    t.update(&snap(vec![], &[3, 9]), 14);
    assert_eq!(
        spans(&t, 3, 4),
        [(Held, 10, Some(14)), (Lost, 14, Some(14))]
    );
    assert_eq!(
        spans(&t, 9, 5),
        [(Held, 10, Some(14)), (Lost, 14, Some(14))]
    );
    t.update(&snap(vec![held()], &[3, 9]), 20);
    let rows = &t.get(JobId(3)).unwrap().hosts;
    assert_eq!(rows.len(), 1, "the same host keeps its row");
    assert_eq!(spans(&t, 3, 4).last(), Some(&(Held, 20, None)));
}

#[test]
fn a_job_that_left_is_kept_closed_and_only_the_last_few_are() {
    let mut t = Timelines::default();
    t.update(
        &snap(vec![machine("m", &[(1, "claimed", Some(1))])], &[1]),
        5,
    );
    t.update(&snap(vec![machine("m", &[(1, "idle", None)])], &[]), 6);
    let one = t.get(JobId(1)).unwrap();
    assert_eq!(one.ended, Some(6));
    assert_eq!(one.hosts[0].spans[0].end, Some(6));
    for j in 2..(MAX_ENDED as u64 + 3) {
        t.update(&snap(vec![], &[j]), 10 + j);
        t.update(&snap(vec![], &[]), 10 + j);
    }
    assert!(
        t.get(JobId(1)).is_none(),
        "the oldest ended job is forgotten"
    );
    assert!(t.get(JobId(MAX_ENDED as u64 + 2)).is_some());
}

#[test]
fn rows_and_spans_are_bounded() {
    let mut t = Timelines::default();
    let mut now = 1;
    for _ in 0..(MAX_SPANS + 10) {
        t.update(
            &snap(vec![machine("m", &[(1, "claimed", Some(1))])], &[1]),
            now,
        );
        t.update(
            &snap(vec![machine("m", &[(1, "suspended", Some(1))])], &[1]),
            now + 1,
        );
        now += 2;
    }
    assert_eq!(spans(&t, 1, 1).len(), MAX_SPANS);
    let many: Vec<(u64, &str, Option<u64>)> = (0..MAX_ROWS as u64 + 5)
        .map(|h| (h + 10, "claimed", Some(2)))
        .collect();
    t.update(&snap(vec![machine("big", &many)], &[1, 2]), now);
    assert_eq!(t.get(JobId(2)).unwrap().hosts.len(), MAX_ROWS);
}

#[test]
fn light_snapshots_keep_a_job_s_timeline_going_and_end_it_when_it_leaves_the_queue() {
    use SpanKind::*;
    let mut t = Timelines::default();
    // Unwatched, the dashboard takes light snapshots: the queue's ids only.
    let light = |machines: Vec<std::sync::Arc<MachineStatus>>, jobs: &[u64]| Snapshot {
        machines,
        light: Some(jobs.iter().map(|&j| JobId(j)).collect()),
        ..Snapshot::default()
    };
    t.update(
        &light(vec![machine("m0", &[(1, "claimed", Some(7))])], &[7]),
        100,
    );
    t.update(
        &snap(vec![machine("m0", &[(1, "claimed", Some(7))])], &[7]),
        105,
    );
    t.update(
        &light(vec![machine("m0", &[(1, "suspended", Some(7))])], &[7]),
        110,
    );
    assert_eq!(
        spans(&t, 7, 1),
        [(Held, 100, Some(110)), (Suspended, 110, None)]
    );
    assert_eq!(t.get(JobId(7)).unwrap().ended, None);
    t.update(&light(vec![machine("m0", &[(1, "idle", None)])], &[]), 115);
    assert_eq!(t.get(JobId(7)).unwrap().ended, Some(115));
}
