//! Branch and bound over step-to-host assignments, for cycles on few hosts.
//!
//! List scheduling and multifit place steps greedily and can miss an
//! assignment that only a search finds (on mixed speeds, a step that must go
//! to a slow host so that a fast one stays free). On a handful of hosts the
//! search is cheap, so [`super::plan`] and [`super::fewest_hosts`] run it
//! there, within a node budget that bounds its cost on every cycle.

use super::{Host, Plan};

/// Plans on at most this many hosts are searched exactly.
pub(super) const EXACT_HOSTS: usize = 8;

/// Cycles of at most this many steps are searched exactly. On 31 steps and
/// 8 hosts the search ran out of its budget (6 to 15 ms a plan, against
/// 0.1 ms for the greedy plans) and `plan` runs at every dispatch of a small
/// cycle; up to 12 steps it ends well within it.
pub(super) const EXACT_STEPS: usize = 12;

/// Nodes one search may visit. A node costs a pass over at most
/// [`EXACT_HOSTS`] hosts, so a search stays well under a millisecond; the
/// cycles WoDi plans (tens of steps, bounds that are usually tight) end far
/// sooner. When the budget runs out the best assignment found so far is
/// kept: still a valid plan, no longer proven best.
pub(super) const NODE_BUDGET: u64 = 5_000;

/// The plan of `work` (seconds on a speed-1 host) on `hosts` with the
/// shortest makespan below `incumbent`, searched depth first, longest step
/// first, each step tried on every host that is not interchangeable with one
/// already tried (same speed, same finish so far). A node is pruned when no
/// completion can beat the best found: the makespan is at least the latest
/// finish so far, and at least the time by which the hosts, all busy until
/// then, could absorb the remaining work.
///
/// `None` when it finds nothing better than the incumbent: with the budget
/// not exhausted, a proof that nothing is.
pub(super) fn best_below(work: &[f64], hosts: &[Host], incumbent: f64) -> Option<Plan> {
    let mut order: Vec<usize> = (0..work.len()).collect();
    order.sort_by(|&a, &b| work[b].total_cmp(&work[a]));
    let sorted: Vec<f64> = order.iter().map(|&i| work[i]).collect();
    let mut rest = vec![0.0; sorted.len() + 1];
    for i in (0..sorted.len()).rev() {
        rest[i] = rest[i + 1] + sorted[i];
    }
    let mut s = State {
        work: &sorted,
        rest: &rest,
        speeds: hosts.iter().map(|h| h.speed).collect(),
        total_speed: hosts.iter().map(|h| h.speed).sum(),
        finish: hosts.iter().map(|h| h.free_in.max(0.0)).collect(),
        at: vec![0; sorted.len()],
        best: incumbent,
        best_at: None,
        nodes: 0,
        stopped: false,
    };
    let usable = !hosts.is_empty() && s.speeds.iter().all(|v| v.is_finite() && *v > 0.0);
    if usable && incumbent.is_finite() {
        s.descend(0);
    }
    s.best_at.map(|at| {
        let mut queues = vec![Vec::new(); hosts.len()];
        let mut finish: Vec<f64> = hosts.iter().map(|h| h.free_in.max(0.0)).collect();
        for (k, &h) in at.iter().enumerate() {
            queues[h].push(order[k]);
            finish[h] += sorted[k] / hosts[h].speed;
        }
        Plan { queues, finish }
    })
}

struct State<'a> {
    /// Steps' work, longest first.
    work: &'a [f64],
    /// `rest[i]`: the work of steps `i..`.
    rest: &'a [f64],
    speeds: Vec<f64>,
    total_speed: f64,
    /// When each host finishes what it was given so far.
    finish: Vec<f64>,
    /// The host of each placed step (by position in `work`).
    at: Vec<usize>,
    best: f64,
    best_at: Option<Vec<usize>>,
    nodes: u64,
    /// The budget ran out.
    stopped: bool,
}

impl State<'_> {
    fn descend(&mut self, i: usize) {
        if self.stopped {
            return;
        }
        self.nodes += 1;
        if self.nodes > NODE_BUDGET {
            self.stopped = true;
            return;
        }
        let latest = self.finish.iter().copied().fold(0.0, f64::max);
        if i == self.work.len() {
            if latest < self.best {
                self.best = latest;
                self.best_at = Some(self.at.clone());
            }
            return;
        }
        // Were every host busy until the makespan t, they would hold
        // sum(finish * speed) + rest by then, so t >= that / total speed
        // (valid because t >= latest >= every finish).
        let held: f64 = self
            .finish
            .iter()
            .zip(&self.speeds)
            .map(|(f, v)| f * v)
            .sum();
        let bound = latest.max((held + self.rest[i]) / self.total_speed);
        if bound >= self.best {
            return;
        }
        let w = self.work[i];
        let mut tries: Vec<(f64, usize)> = Vec::with_capacity(self.finish.len());
        for h in 0..self.finish.len() {
            let twin = (0..h)
                .any(|g| self.finish[g] == self.finish[h] && self.speeds[g] == self.speeds[h]);
            let end = self.finish[h] + w / self.speeds[h];
            if !twin && end < self.best {
                tries.push((end, h));
            }
        }
        // Earliest finish first: the greedy choice, so that good plans are
        // found early and prune the rest.
        tries.sort_by(|a, b| a.0.total_cmp(&b.0));
        for (_, h) in tries {
            let before = self.finish[h];
            self.finish[h] += w / self.speeds[h];
            self.at[i] = h;
            self.descend(i + 1);
            self.finish[h] = before;
            if self.stopped {
                return;
            }
        }
    }
}
