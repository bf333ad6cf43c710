//! The global RM's numbers for Prometheus (`/metrics` on the dashboard's
//! port, `docs/metrics.md`): the pool and the queue as the dashboard's view
//! has them (machines, slots, jobs by state and user, the queue's length
//! and age), the core's own counters (requests denied for their token's
//! power, [`CoreCounters`]), and what only the driver sees: connections and
//! refused handshakes (the connection [`Gate`]'s counts), time spent in the
//! core per input and fsync latency of the journal ([`METRICS`]).
//!
//! The driver's counters are one process-wide [`Metrics`]: a process runs
//! one global RM (the daemon, or an embedded pool's), and the places that
//! count (the journal, the connection tasks, the router task) then need no
//! handle threaded through them. The page itself is written by
//! `dashboard::scrape`, pure, from these and the dashboard's view.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use carmi_api::exposition::Buckets;
use carmi_api::gate::Gate;

/// Upper bounds of the latency histograms, in seconds: from a tenth of a
/// millisecond (an fsync on a fast disk, one message through the core) to
/// a second (a stalled disk, a pass over a large pool).
pub const BOUNDS_S: [f64; 12] = [
    0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1.0,
];

/// A latency histogram of atomics, filled from any thread without a lock.
#[derive(Debug)]
pub struct Histogram {
    /// Observations at most each bound of [`BOUNDS_S`] (and above the last).
    counts: [AtomicU64; BOUNDS_S.len() + 1],
    /// Sum of the observations, in nanoseconds.
    sum_ns: AtomicU64,
}

impl Histogram {
    /// An empty histogram.
    pub const fn new() -> Histogram {
        Histogram {
            counts: [const { AtomicU64::new(0) }; BOUNDS_S.len() + 1],
            sum_ns: AtomicU64::new(0),
        }
    }

    /// Counts one observation of `d`.
    pub fn observe(&self, d: Duration) {
        let s = d.as_secs_f64();
        let i = BOUNDS_S
            .iter()
            .position(|&b| s <= b)
            .unwrap_or(BOUNDS_S.len());
        self.counts[i].fetch_add(1, Ordering::Relaxed);
        let ns = u64::try_from(d.as_nanos()).unwrap_or(u64::MAX);
        self.sum_ns.fetch_add(ns, Ordering::Relaxed);
    }

    /// Its state now, for the page.
    pub fn buckets(&self) -> Buckets {
        let n = |i: usize| self.counts[i].load(Ordering::Relaxed);
        Buckets {
            counts: BOUNDS_S
                .iter()
                .enumerate()
                .map(|(i, &b)| (b, n(i)))
                .collect(),
            over: n(BOUNDS_S.len()),
            sum: self.sum_ns.load(Ordering::Relaxed) as f64 / 1e9,
        }
    }
}

impl Default for Histogram {
    fn default() -> Self {
        Histogram::new()
    }
}

/// What the driver counts.
#[derive(Default)]
pub struct Metrics {
    /// The running server's connection gate (admitted, refused, open).
    gate: Mutex<Option<Arc<Gate>>>,
    /// Connections whose token the authority did not admit.
    denied_connections: AtomicU64,
    /// Time of each `fsync` of the journal.
    pub fsync: Histogram,
    /// Time the core took over one input or tick, the allocator's passes
    /// it caused included, on the router task.
    pub core_step: Histogram,
}

/// The process's global RM's counters.
pub static METRICS: Metrics = Metrics::new();

impl Metrics {
    /// Nothing counted yet.
    pub const fn new() -> Metrics {
        Metrics {
            gate: Mutex::new(None),
            denied_connections: AtomicU64::new(0),
            fsync: Histogram::new(),
            core_step: Histogram::new(),
        }
    }

    /// The server's connection gate, whose counts the page shows.
    pub fn watch_gate(&self, gate: &Arc<Gate>) {
        *self.gate.lock().unwrap_or_else(|e| e.into_inner()) = Some(gate.clone());
    }

    /// A connection's token was not admitted.
    pub fn denied_connection(&self) {
        self.denied_connections.fetch_add(1, Ordering::Relaxed);
    }

    /// Connections open and in their handshake, and admitted and refused
    /// since the start, as the running server's gate counts them.
    pub fn connections(&self) -> ((usize, usize), (u64, u64)) {
        let gate = self.gate.lock().unwrap_or_else(|e| e.into_inner()).clone();
        match gate {
            Some(g) => (g.counts(), g.totals()),
            None => ((0, 0), (0, 0)),
        }
    }

    /// Connections whose token was not admitted, since the start.
    pub fn denied_connections(&self) -> u64 {
        self.denied_connections.load(Ordering::Relaxed)
    }

    /// Times `f` into `h`.
    pub fn time<T>(h: &Histogram, f: impl FnOnce() -> T) -> T {
        let start = std::time::Instant::now();
        let out = f();
        h.observe(start.elapsed());
        out
    }
}

/// What the core counts as a by-product of its decisions, taken with each
/// dashboard snapshot.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CoreCounters {
    /// Requests refused because their token lacks the power.
    pub denied_requests: u64,
}
