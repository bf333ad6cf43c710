//! Planning a cycle from history: what WoDi learns and how it uses it.
//!
//! Pure functions and one small table, no I/O and no clock, so that the
//! scheduler core, the simulator and the tests all compute the same plans.
//!
//! - [`History`]: per step, its compute time normalized to a host of speed 1,
//!   adapting when a step's time drifts from cycle to cycle.
//! - [`longest_first`]: the order in which a cycle's steps go out.
//! - [`plan`]: longest-processing-time list scheduling on hosts of different
//!   speeds: each step, longest first, goes to the host on which it would
//!   *finish* earliest (a fast host that frees up soon beats a slow idle one);
//!   for a small cycle, a [`multifit`] packing instead when it ends sooner.
//! - [`fewest_hosts`]: the smallest number of hosts with which a cycle
//!   finishes in (almost) the time of its longest step.
//! - [`lower_bound`]: no schedule of a cycle can be shorter than this.

use std::collections::HashMap;
use std::hash::Hash;

use serde::{Deserialize, Serialize};

use crate::ids::StepId;

mod exact;

/// Weight of the newest sample once a step has a few: high enough that an
/// estimate follows a step whose time drifts within two or three cycles, low
/// enough that one noisy cycle moves it by less than a third.
const DRIFT_WEIGHT: f64 = 0.3;

/// A step's estimated compute time on a host of speed 1, in seconds.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Estimate {
    /// The current estimate.
    pub mean: f64,
    /// How many observations it rests on.
    pub samples: u32,
}

impl Estimate {
    fn observe(&mut self, work: f64) {
        self.samples += 1;
        // A running mean for the first samples (each counts equally), then an
        // exponentially weighted one so that old cycles fade out.
        let weight = (1.0 / f64::from(self.samples)).max(DRIFT_WEIGHT);
        self.mean += weight * (work - self.mean);
    }
}

/// Compute-time history of the steps of a run, keyed by step id.
///
/// Times are normalized by the speed of the host a step ran on (`elapsed *
/// speed`), so a step seen on a slow host and then on a fast one keeps one
/// estimate.
#[derive(Clone, Debug, Default)]
pub struct History<K> {
    steps: HashMap<K, Estimate>,
}

impl<K: Hash + Eq> History<K> {
    /// An empty history.
    pub fn new() -> History<K> {
        History {
            steps: HashMap::new(),
        }
    }

    /// Records that `step` took `elapsed` seconds on a host of relative speed `speed`.
    /// Non-finite or non-positive inputs are ignored: they carry no information.
    pub fn observe(&mut self, step: K, elapsed: f64, speed: f64) {
        if !(elapsed.is_finite() && speed.is_finite() && elapsed >= 0.0 && speed > 0.0) {
            return;
        }
        let work = elapsed * speed;
        self.steps
            .entry(step)
            .and_modify(|e| e.observe(work))
            .or_insert(Estimate {
                mean: work,
                samples: 1,
            });
    }

    /// Puts back an estimate saved earlier (a master's checkpoint), replacing
    /// what was learned of `step` so far. Non-finite or negative means are ignored.
    pub fn restore(&mut self, step: K, estimate: Estimate) {
        if estimate.mean.is_finite() && estimate.mean >= 0.0 {
            self.steps.insert(step, estimate);
        }
    }

    /// The estimated work of `step` (seconds on a speed-1 host), if it was ever seen.
    pub fn estimate(&self, step: &K) -> Option<f64> {
        self.steps.get(step).map(|e| e.mean)
    }

    /// The full estimate of `step`.
    pub fn find(&self, step: &K) -> Option<Estimate> {
        self.steps.get(step).copied()
    }

    /// Every step with its estimate, in no particular order.
    pub fn iter(&self) -> impl Iterator<Item = (&K, &Estimate)> {
        self.steps.iter()
    }

    /// Number of steps with history.
    pub fn len(&self) -> usize {
        self.steps.len()
    }

    /// True when nothing has been observed.
    pub fn is_empty(&self) -> bool {
        self.steps.is_empty()
    }
}

/// The order in which steps go out: those without history first, in the order
/// given (so that history builds up), then the rest by estimate, longest
/// first; equal estimates keep the order given. Returns indices into `estimates`.
pub fn longest_first(estimates: &[Option<f64>]) -> Vec<usize> {
    let mut order: Vec<usize> = (0..estimates.len()).collect();
    // Stable sort: unknown (None) before known, known by descending estimate.
    order.sort_by(|&a, &b| match (estimates[a], estimates[b]) {
        (None, None) => std::cmp::Ordering::Equal,
        (None, Some(_)) => std::cmp::Ordering::Less,
        (Some(_), None) => std::cmp::Ordering::Greater,
        (Some(x), Some(y)) => y.total_cmp(&x),
    });
    order
}

/// A host as the planner sees it.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Host {
    /// Seconds from now until it can start another step (0 when idle).
    pub free_in: f64,
    /// Relative speed (1 = the speed history is normalized to).
    pub speed: f64,
}

/// The result of [`plan`].
#[derive(Clone, Debug, PartialEq)]
pub struct Plan {
    /// For each host, the steps (indices into the work list) it runs, in order.
    pub queues: Vec<Vec<usize>>,
    /// When each host finishes its queue, in seconds from now.
    pub finish: Vec<f64>,
}

impl Plan {
    /// When the last host finishes (0 with no hosts or no work).
    pub fn makespan(&self) -> f64 {
        self.finish.iter().copied().fold(0.0, f64::max)
    }
}

/// Cycles of at most this many steps, on at most this many hosts, are also
/// packed by [`multifit`]: it costs `PACK_ROUNDS` first-fit passes, cheap
/// for a cycle of tens of steps and left out for a bag of thousands, where
/// LPT is already close to the bound.
const PACK_STEPS: usize = 64;
/// See [`PACK_STEPS`].
const PACK_HOSTS: usize = 64;
/// Bisection rounds of [`multifit`] (its answer is within 2^-rounds of the
/// capacity it searches for, relative to LPT's makespan).
const PACK_ROUNDS: u32 = 20;

/// The best of three plans: longest-processing-time list scheduling on
/// uniform hosts (steps in [`longest_first`] order, each to the host where it
/// would finish earliest, ties to the faster host, then the lower index)
/// and, for a small cycle whose steps all have history, a [`multifit`]
/// packing, kept when it ends sooner, and for at most 12 steps on at most 8
/// hosts the best plan a branch-and-bound search finds below those two (the
/// shortest possible unless its node budget runs out). LPT alone can be several percent over
/// the best packing on the stable, repeated cycles WoDi runs (5% on the
/// materials profile at 16 hosts), and each cycle repeats that waste.
/// `work[i]` is step i's estimated work on a speed-1 host; `None` (no
/// history yet) counts as the mean of the known ones, or 1 s if none is known.
pub fn plan(work: &[Option<f64>], hosts: &[Host]) -> Plan {
    let lpt = list_plan(work, hosts);
    if work.len() > PACK_STEPS || hosts.len() > PACK_HOSTS || hosts.len() < 2 {
        return lpt;
    }
    let Some(known) = work.iter().copied().collect::<Option<Vec<f64>>>() else {
        return lpt;
    };
    let best = match multifit(&known, hosts, lpt.makespan()) {
        Some(packed) if packed.makespan() < lpt.makespan() * (1.0 - 1e-9) => packed,
        _ => lpt,
    };
    if hosts.len() > exact::EXACT_HOSTS || known.len() > exact::EXACT_STEPS {
        return best;
    }
    // On a few hosts, search for a better plan than the greedy ones; a
    // plan within 1e-9 of the best found is not worth a different layout.
    let incumbent = best.makespan() * (1.0 - 1e-9);
    exact::best_below(&known, hosts, incumbent).unwrap_or(best)
}

/// Longest-processing-time list scheduling alone (see [`plan`]).
pub fn list_plan(work: &[Option<f64>], hosts: &[Host]) -> Plan {
    let mut queues = vec![Vec::new(); hosts.len()];
    let mut finish: Vec<f64> = hosts.iter().map(|h| h.free_in.max(0.0)).collect();
    if hosts.is_empty() {
        return Plan { queues, finish };
    }
    let known: Vec<f64> = work.iter().flatten().copied().collect();
    let fallback = if known.is_empty() {
        1.0
    } else {
        known.iter().sum::<f64>() / known.len() as f64
    };
    for i in longest_first(work) {
        let w = work[i].unwrap_or(fallback);
        let best = best_host(w, hosts, &finish);
        finish[best] += w / hosts[best].speed;
        queues[best].push(i);
    }
    Plan { queues, finish }
}

/// Multifit (Coffman, Garey and Johnson) on uniform hosts: the smallest
/// deadline, found by bisection below `upper`, by which first-fit
/// decreasing packs every step (longest first, each on the fastest host that
/// still ends it by the deadline, hosts counted from when they are free).
/// `None` when no deadline below `upper` packs.
pub fn multifit(work: &[f64], hosts: &[Host], upper: f64) -> Option<Plan> {
    if !upper.is_finite()
        || upper <= 0.0
        || hosts.iter().any(|h| h.speed.is_nan() || h.speed <= 0.0)
    {
        return None;
    }
    let mut order: Vec<usize> = (0..work.len()).collect();
    order.sort_by(|&a, &b| work[b].total_cmp(&work[a]));
    let mut by_speed: Vec<usize> = (0..hosts.len()).collect();
    by_speed.sort_by(|&a, &b| hosts[b].speed.total_cmp(&hosts[a].speed));
    let fits = |deadline: f64| -> Option<Plan> {
        let mut queues = vec![Vec::new(); hosts.len()];
        let mut finish: Vec<f64> = hosts.iter().map(|h| h.free_in.max(0.0)).collect();
        for &i in &order {
            let h = by_speed
                .iter()
                .copied()
                .find(|&h| finish[h] + work[i] / hosts[h].speed <= deadline)?;
            finish[h] += work[i] / hosts[h].speed;
            queues[h].push(i);
        }
        Some(Plan { queues, finish })
    };
    let mut lo = 0.0;
    let mut hi = upper;
    let mut best = None;
    for _ in 0..PACK_ROUNDS {
        let mid = (lo + hi) / 2.0;
        match fits(mid) {
            Some(p) => {
                hi = mid;
                best = Some(p);
            }
            None => lo = mid,
        }
    }
    best
}

/// The host on which `work` would finish earliest given when each is free.
fn best_host(work: f64, hosts: &[Host], free_at: &[f64]) -> usize {
    let mut best = 0;
    let mut best_end = f64::INFINITY;
    for (i, h) in hosts.iter().enumerate() {
        let end = free_at[i] + work / h.speed;
        let better = end < best_end - 1e-12
            || ((end - best_end).abs() <= 1e-12 && h.speed > hosts[best].speed);
        if better {
            best = i;
            best_end = end;
        }
    }
    best
}

/// The shortest time in which any schedule can finish `work` (seconds on a
/// speed-1 host) on hosts of the given speeds, all idle now: the longest step
/// on the fastest host, or all the work spread perfectly, whichever is longer.
pub fn lower_bound(work: &[f64], speeds: &[f64]) -> f64 {
    let fastest = speeds.iter().copied().fold(0.0, f64::max);
    if work.is_empty() {
        return 0.0;
    }
    if fastest <= 0.0 {
        return f64::INFINITY;
    }
    let longest = work.iter().copied().fold(0.0, f64::max);
    let total: f64 = work.iter().sum();
    let capacity: f64 = speeds.iter().filter(|s| **s > 0.0).sum();
    (longest / fastest).max(total / capacity)
}

/// The fewest hosts, taken fastest first from `speeds`, with which a cycle of
/// `work` finishes within `(1 + tolerance)` times its longest step on the
/// fastest host (the best any number of hosts can do). If even all of them
/// cannot, all of them.
///
/// A count qualifies when [`plan`], which is what WoDi runs, meets the target
/// with it; so asking for that many hosts does reach the promised time when
/// the estimates hold. Counts whose hosts cannot hold the work by the target
/// even perfectly spread are skipped without planning.
///
/// **Exact on up to 8 hosts and 12 steps.** There [`plan`] searches
/// assignments by branch and bound (within a node budget): when the answer
/// is at most 8 hosts for a cycle of at most 12 steps it is the true
/// fewest, as the property test against brute force checks. The fastest `k`
/// hosts are the best `k` to take (a faster host can run whatever a slower
/// one ran, no later), so only one set per count is tried.
///
/// **Within one host of the optimum on large cycles of small steps.** Let
/// `T` be the target, `s_1 >= s_2 >= ...` the speeds, `W` the total work
/// and `L` the fewest hosts whose capacity holds it, that is
/// `T (s_1 + ... + s_L) >= W`. No plan does with fewer, so `L <= OPT`.
///
/// Claim: if every step but the longest has work at most `T s_(L+1) / L`
/// (it runs in at most `1/L` of the target on the `(L+1)`-th host), then
/// `L + 1` hosts reach the target, so the answer is at most
/// `L + 1 <= OPT + 1`.
///
/// Proof: [`plan`] ends no later than list scheduling (each step, longest
/// first, to the host where it ends earliest). The longest goes first, to
/// the fastest host, and ends by `T`. Let another step `x` of work `w` end
/// last, at `C`. When `x` was placed, on every host `j` it would have ended
/// no sooner than `C`: host `j` was busy until `f_j`, with
/// `f_j >= C - w / s_j`, and had done `f_j s_j`, at least `C s_j - w`, of
/// the other work. Summed over the `k = L + 1` hosts, with
/// `S = s_1 + ... + s_k`: `W - w >= C S - k w`, so `C <= (W + L w) / S`.
/// With `W <= T (S - s_(L+1))` and `L w <= T s_(L+1)`, `C <= T`.
///
/// Outside that condition (a few steps nearly as long as the target, as in
/// the materials profile) the answer is exact up to 8 hosts (12 steps) and
/// the greedy count above that, with no such guarantee: deciding whether two hosts
/// suffice is already the partition problem, and whether any fast rule is
/// always within one bin of the optimum is open even for bin packing.
pub fn fewest_hosts(work: &[f64], speeds: &[f64], tolerance: f64) -> usize {
    let mut speeds: Vec<f64> = speeds.iter().copied().filter(|s| *s > 0.0).collect();
    speeds.sort_by(|a, b| b.total_cmp(a));
    if work.is_empty() || speeds.is_empty() {
        return 0;
    }
    let longest = work.iter().copied().fold(0.0, f64::max);
    let target = longest / speeds[0] * (1.0 + tolerance.max(0.0));
    let deadline = target * (1.0 + 1e-9);
    let total: f64 = work.iter().sum();
    let opt: Vec<Option<f64>> = work.iter().map(|w| Some(*w)).collect();
    let mut capacity = 0.0;
    for k in 1..=speeds.len() {
        capacity += speeds[k - 1] * deadline;
        if capacity * (1.0 + 1e-9) < total {
            continue;
        }
        let hosts: Vec<Host> = speeds[..k]
            .iter()
            .map(|&speed| Host {
                free_in: 0.0,
                speed,
            })
            .collect();
        if plan(&opt, &hosts).makespan() <= deadline {
            return k;
        }
    }
    speeds.len()
}

/// Hysteresis on a host count (the fewest-hosts answer, recomputed every
/// cycle from estimates that wobble): an answer one off the count changes it
/// only once answers have differed from it in the same direction `patience`
/// times in a row, and then to the latest; an answer further off is taken at
/// once (the first plan from a user's count, a pool that changed). Without it a count on the edge flips by one
/// every few cycles and each flip releases or asks for a host.
#[derive(Clone, Debug)]
pub struct Hysteresis {
    current: u32,
    patience: u32,
    /// Answers in a row above (positive) or below (negative) the count.
    streak: i64,
}

impl Hysteresis {
    /// Starts at `current`; `patience` 0 or 1 follows every change.
    pub fn new(current: u32, patience: u32) -> Hysteresis {
        Hysteresis {
            current,
            patience,
            streak: 0,
        }
    }

    /// The count to use now that `wanted` is asked for.
    pub fn update(&mut self, wanted: u32) -> u32 {
        let dir: i64 = match wanted.cmp(&self.current) {
            std::cmp::Ordering::Equal => {
                self.streak = 0;
                return self.current;
            }
            std::cmp::Ordering::Greater => 1,
            std::cmp::Ordering::Less => -1,
        };
        if wanted.abs_diff(self.current) > 1 {
            self.current = wanted;
            self.streak = 0;
            return self.current;
        }
        self.streak = if self.streak.signum() == dir {
            self.streak + dir
        } else {
            dir
        };
        if self.streak.unsigned_abs() >= u64::from(self.patience) {
            self.current = wanted;
            self.streak = 0;
        }
        self.current
    }
}

/// One step's history estimate, as saved.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct SavedEstimate {
    /// The step.
    pub step: StepId,
    /// Its estimated work on a speed-1 host, seconds.
    pub mean: f64,
    /// Observations behind it.
    pub samples: u32,
}

/// The history as a list, sorted by step id (so files compare byte for byte).
pub fn snapshot(history: &History<StepId>) -> Vec<SavedEstimate> {
    let mut out: Vec<SavedEstimate> = history
        .iter()
        .map(|(step, e)| SavedEstimate {
            step: *step,
            mean: e.mean,
            samples: e.samples,
        })
        .collect();
    out.sort_by_key(|e| e.step);
    out
}

/// Puts saved estimates back into a history.
pub fn restore(history: &mut History<StepId>, saved: &[SavedEstimate]) {
    for e in saved {
        history.restore(
            e.step,
            Estimate {
                mean: e.mean,
                samples: e.samples,
            },
        );
    }
}

#[cfg(test)]
#[path = "plan_tests.rs"]
mod tests;
