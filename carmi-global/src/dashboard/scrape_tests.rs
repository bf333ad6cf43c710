//! The page from a known view: every family Prometheus reads, with the
//! numbers the view holds.

use std::time::Duration;

use carmi_api::ids::{HostId, JobId};
use carmi_api::msg::{JobStatus, MachineStatus, SlotStatus};

use super::*;
use crate::dashboard::{Snapshot, Viewer};
use crate::metrics::{CoreCounters, Metrics};
use carmi_api::gate::Gate;

fn machine(name: &str, states: &[&str]) -> std::sync::Arc<MachineStatus> {
    std::sync::Arc::new(MachineStatus {
        name: name.into(),
        attributes: vec![].into(),
        slots: (states.iter().enumerate())
            .map(|(i, s)| SlotStatus {
                host: HostId(i as u64),
                state: s.to_string().into(),
                job: None,
            })
            .collect(),
    })
}

fn job(id: u64, owner: &str, state: &str, submitted_unix: u64) -> JobStatus {
    JobStatus {
        job: JobId(id),
        cluster: None,
        proc: 0,
        owner: owner.into(),
        submitted_unix,
        state: state.into(),
        executable: "/bin/true".into(),
        master: None,
        classes: vec![],
        note: None,
        user: None,
        attrs: vec![],
    }
}

fn value(page: &str, series: &str) -> f64 {
    let line = (page.lines())
        .find(|l| l.strip_prefix(series).is_some_and(|r| r.starts_with(' ')))
        .unwrap_or_else(|| panic!("no {series} in\n{page}"));
    line.rsplit(' ').next().unwrap().parse().unwrap()
}

#[test]
fn the_page_counts_the_pool_and_the_queue_of_the_view() {
    let mut viewer = Viewer::new();
    // m2 is seen once, then gone: lost.
    let first = Snapshot {
        machines: vec![
            machine("m1", &["claimed", "idle"]),
            machine("m2", &["idle"]),
        ],
        ..Snapshot::default()
    };
    viewer.update(first, 100);
    let snap = Snapshot {
        machines: vec![machine("m1", &["claimed", "idle"])],
        jobs: vec![
            job(1, "alice", "running", 900),
            job(2, "alice", "waiting", 950),
            job(3, "bob", "waiting", 930),
            job(4, "bob", "held", 10),
        ],
        ..Snapshot::default()
    };
    let view = viewer.update(snap, 1000);
    let m = Metrics::new();
    m.fsync.observe(Duration::from_micros(300));
    m.fsync.observe(Duration::from_secs(2));
    m.denied_connection();
    let page = render(&view, CoreCounters { denied_requests: 2 }, 1000, &m);

    assert_eq!(value(&page, "carmi_machines{state=\"lent\"}"), 1.0);
    assert_eq!(value(&page, "carmi_machines{state=\"lost\"}"), 1.0);
    assert_eq!(value(&page, "carmi_machines{state=\"idle\"}"), 0.0);
    assert_eq!(value(&page, "carmi_slots{state=\"claimed\"}"), 1.0);
    assert_eq!(value(&page, "carmi_slots{state=\"idle\"}"), 1.0);
    assert_eq!(value(&page, "carmi_slots{state=\"owner\"}"), 0.0);
    let jobs = |state: &str, user: &str| {
        value(
            &page,
            &format!("carmi_jobs{{state=\"{state}\",user=\"{user}\"}}"),
        )
    };
    assert_eq!(jobs("waiting", "alice"), 1.0);
    assert_eq!(jobs("waiting", "bob"), 1.0);
    assert_eq!(jobs("held", "bob"), 1.0);
    assert_eq!(value(&page, "carmi_jobs_by_state{state=\"waiting\"}"), 2.0);
    assert_eq!(value(&page, "carmi_jobs_by_state{state=\"attached\"}"), 0.0);
    assert_eq!(value(&page, "carmi_queue_length"), 2.0);
    // The held job is older, but it does not wait.
    assert_eq!(value(&page, "carmi_queue_oldest_waiting_seconds"), 70.0);
    assert_eq!(
        value(&page, "carmi_token_denials_total{at=\"connection\"}"),
        1.0
    );
    assert_eq!(
        value(&page, "carmi_token_denials_total{at=\"request\"}"),
        2.0
    );
    assert_eq!(
        value(&page, "carmi_journal_fsync_seconds_bucket{le=\"0.0005\"}"),
        1.0
    );
    assert_eq!(
        value(&page, "carmi_journal_fsync_seconds_bucket{le=\"1\"}"),
        1.0
    );
    assert_eq!(
        value(&page, "carmi_journal_fsync_seconds_bucket{le=\"+Inf\"}"),
        2.0
    );
    assert_eq!(value(&page, "carmi_journal_fsync_seconds_count"), 2.0);
    assert!((value(&page, "carmi_journal_fsync_seconds_sum") - 2.0003).abs() < 1e-9);
    assert_eq!(value(&page, "carmi_connections_open"), 0.0);
}

#[test]
fn the_gate_s_connections_and_refusals_are_counted() {
    let gate = Gate::new(carmi_api::gate::ConnLimits::default());
    let m = Metrics::new();
    m.watch_gate(&gate);
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .unwrap();
    let _ticket = rt.block_on(async { gate.admit([127, 0, 0, 1].into()) });
    gate.note_refusal([10, 0, 0, 1].into(), "bad secret");
    let view = Viewer::new().update(Snapshot::default(), 0);
    let page = render(&view, CoreCounters::default(), 0, &m);
    assert_eq!(value(&page, "carmi_connections_open"), 1.0);
    assert_eq!(value(&page, "carmi_connections_accepted_total"), 1.0);
    assert_eq!(value(&page, "carmi_handshakes_refused_total"), 1.0);
}

/// The families a page declares (`# TYPE name kind`).
fn families(page: &str) -> Vec<&str> {
    (page.lines())
        .filter_map(|l| l.strip_prefix("# TYPE "))
        .filter_map(|l| l.split(' ').next())
        .collect()
}

#[test]
fn every_family_is_documented_in_docs_metrics_md() {
    let doc = include_str!("../../../docs/metrics.md");
    let view = Viewer::new().update(Snapshot::default(), 0);
    let page = render(&view, CoreCounters::default(), 0, &Metrics::new());
    let names = families(&page);
    assert!(names.len() > 10, "{page}");
    for name in names {
        assert!(
            doc.contains(&format!("| `{name}` |")),
            "{name} is not in docs/metrics.md's tables"
        );
    }
}
