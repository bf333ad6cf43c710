//! The global RM's `/metrics` page (`docs/metrics.md`): the pool and the
//! queue as the dashboard's view has them (machines, slots, jobs by state
//! and user, the queue's length and age), the core's counters
//! ([`CoreCounters`]) and the driver's ([`Metrics`]), in Prometheus' text
//! format. Pure: the handler passes a view and the counters in.

use std::collections::BTreeMap;

use carmi_api::exposition::{Exposition, Kind};

use super::View;
use crate::metrics::{CoreCounters, Metrics};

/// Machine states always written (0 when none): a series that vanishes
/// reads as "no data" in Prometheus, not as zero.
const MACHINE_STATES: [&str; 5] = ["idle", "lent", "suspended", "owner", "lost"];
const SLOT_STATES: [&str; 5] = ["idle", "claimed", "suspended", "owner", "offline"];
const JOB_STATES: [&str; 4] = ["attached", "waiting", "running", "held"];

/// The page: the view's pool and queue at `now_unix`, the core's counters
/// and the driver's.
pub fn render(view: &View, core: CoreCounters, now_unix: u64, m: &Metrics) -> String {
    let mut e = Exposition::new();
    pool(&mut e, view);
    queue(&mut e, view, now_unix);
    let ((open, handshaking), (admitted, refused)) = m.connections();
    e.single(
        "carmi_connections_open",
        Kind::Gauge,
        "Connections open now (daemons, applications, carmi), handshakes included.",
        open as f64,
    )
    .single(
        "carmi_connections_handshaking",
        Kind::Gauge,
        "Connections open now that have not finished their handshake.",
        handshaking as f64,
    )
    .single(
        "carmi_connections_accepted_total",
        Kind::Counter,
        "Connections admitted by the gate since the start.",
        admitted as f64,
    )
    .single(
        "carmi_handshakes_refused_total",
        Kind::Counter,
        "Connections refused or handshakes failed (limits, TLS, secret, timeouts) since the start.",
        refused as f64,
    );
    let denied = m.denied_connections();
    e.family(
        "carmi_token_denials_total",
        Kind::Counter,
        "Tokens refused since the start: at connection (unknown, revoked, expired) or for a request beyond their power.",
    )
    .sample("carmi_token_denials_total", &[("at", "connection")], denied as f64)
    .sample(
        "carmi_token_denials_total",
        &[("at", "request")],
        core.denied_requests as f64,
    );
    e.histogram(
        "carmi_core_step_seconds",
        "Time the router task spent in the core for one input or tick, allocator passes included.",
        &m.core_step.buckets(),
    )
    .histogram(
        "carmi_journal_fsync_seconds",
        "Time of each fsync of the journal (one per round of records).",
        &m.fsync.buckets(),
    );
    e.finish()
}

/// Machines and slots by state.
fn pool(e: &mut Exposition, view: &View) {
    let mut machines: BTreeMap<&str, u64> = MACHINE_STATES.iter().map(|s| (*s, 0)).collect();
    let mut slots: BTreeMap<&str, u64> = SLOT_STATES.iter().map(|s| (*s, 0)).collect();
    for m in &view.machines {
        *machines.entry(m.state.as_str()).or_default() += 1;
        for s in &m.slots {
            *slots.entry(&*s.state).or_default() += 1;
        }
    }
    e.family(
        "carmi_machines",
        Kind::Gauge,
        "Machines by state: idle, lent (a job holds a slot), suspended, owner (its owner uses it), lost (seen, now gone).",
    );
    for (state, n) in machines {
        e.sample("carmi_machines", &[("state", state)], n as f64);
    }
    e.family(
        "carmi_slots",
        Kind::Gauge,
        "Slots of the machines online by state (as carmi status shows them).",
    );
    for (state, n) in slots {
        e.sample("carmi_slots", &[("state", state)], n as f64);
    }
}

/// Jobs by state and user, and the waiting queue's length and age.
fn queue(e: &mut Exposition, view: &View, now_unix: u64) {
    let mut jobs: BTreeMap<(&str, &str), u64> = BTreeMap::new();
    let (mut waiting, mut oldest) = (0u64, None::<u64>);
    for j in &view.jobs {
        *jobs
            .entry((j.state.as_str(), j.owner.as_str()))
            .or_default() += 1;
        if j.state == "waiting" {
            waiting += 1;
            oldest = Some(oldest.map_or(j.submitted_unix, |o| o.min(j.submitted_unix)));
        }
    }
    let mut by_state: BTreeMap<&str, u64> = JOB_STATES.iter().map(|s| (*s, 0)).collect();
    for ((state, _), n) in &jobs {
        *by_state.entry(*state).or_default() += n;
    }
    e.family(
        "carmi_jobs",
        Kind::Gauge,
        "Jobs in the queue by state (attached, waiting, running, held) and user (as carmi q).",
    );
    for ((state, user), n) in &jobs {
        e.sample(
            "carmi_jobs",
            &[("state", *state), ("user", *user)],
            *n as f64,
        );
    }
    e.family(
        "carmi_jobs_by_state",
        Kind::Gauge,
        "Jobs in the queue by state, every user together (0 where none).",
    );
    for (state, n) in by_state {
        e.sample("carmi_jobs_by_state", &[("state", state)], n as f64);
    }
    e.single(
        "carmi_queue_length",
        Kind::Gauge,
        "Jobs waiting for hosts (state waiting).",
        waiting as f64,
    )
    .single(
        "carmi_queue_oldest_waiting_seconds",
        Kind::Gauge,
        "Age of the oldest waiting job since its submission (0 when none waits).",
        oldest.map_or(0, |o| now_unix.saturating_sub(o)) as f64,
    );
}

#[cfg(test)]
#[path = "scrape_tests.rs"]
mod tests;
