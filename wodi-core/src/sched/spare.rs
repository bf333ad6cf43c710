//! Not replacing a host its owner took while the hosts left still end the
//! cycle within its target (`SchedConfig::spare_losses`, issue 34's third
//! lever, docs/results.md "Fewer grants").
//!
//! A replacement costs a grant; the fewest-hosts count was chosen with
//! slack (a cycle may take `1 + tolerance` times its longest step), and a
//! host lost late in a cycle often leaves enough of it. The request is then
//! deferred, not dropped: the next cycle's dispatch asks for the hosts its
//! count is missing, unless the hosts held still meet that cycle's target.

use super::{Sched, Time, WorkerState};
use crate::plan::{Host, plan};

/// The longest step of the cycle under way, as far as the core knows it.
#[derive(Clone, Copy, Debug, Default)]
pub(super) struct CycleTarget {
    /// When the cycle began, seconds.
    pub begin_s: f64,
    /// Its longest step's estimate (speed-1 seconds) among those submitted.
    pub longest: f64,
    /// A step of the cycle has no estimate: no target to judge by.
    pub unknown: bool,
}

impl CycleTarget {
    /// A cycle beginning at `begin_s`.
    pub fn begin(begin_s: f64) -> CycleTarget {
        CycleTarget {
            begin_s,
            longest: 0.0,
            unknown: false,
        }
    }

    /// A step of the cycle was submitted with `estimate`.
    pub fn submitted(&mut self, estimate: Option<f64>) {
        match estimate {
            Some(e) => self.longest = self.longest.max(e),
            None => self.unknown = true,
        }
    }
}

impl Sched {
    /// With `spare_losses`: whether the hosts held now end every queued and
    /// running step of the cycle by its target, `begin + (1 + tolerance) *
    /// longest / fastest`, by a plan from their current work, so that no
    /// more host needs to be asked for. False whenever that cannot be
    /// judged (no cycle, a step without an estimate, a suspended worker
    /// with a step in hand).
    pub(super) fn can_spare(&self, now: Time) -> bool {
        let Some(tolerance) = self.cfg.spare_losses.filter(|_| self.cfg.release_idle) else {
            return false;
        };
        let target = self.cycle_target;
        if target.unknown || target.longest <= 0.0 || self.queue.without_estimate().next().is_some()
        {
            return false;
        }
        let t = now.as_secs_f64();
        let Some(hosts) = self.hosts_free_at(t) else {
            return false;
        };
        let fastest = hosts.iter().map(|h| h.speed).fold(0.0, f64::max);
        if fastest <= 0.0 {
            return false;
        }
        let deadline = target.begin_s + (1.0 + tolerance) * target.longest / fastest;
        let work: Vec<Option<f64>> = self.queue.longest_first().map(|(_, e)| Some(e)).collect();
        t + plan(&work, &hosts).makespan() <= deadline
    }

    /// The ready and starting workers' hosts, each free after the steps in
    /// its hands (by their estimates); `None` if some step in hand has no
    /// estimate or a suspended or detached worker still holds an open one.
    fn hosts_free_at(&self, t: f64) -> Option<Vec<Host>> {
        let mut hosts = Vec::new();
        for w in self.workers.values() {
            let open: Vec<_> = w
                .in_hand
                .iter()
                .filter(|(k, _)| self.tasks.contains_key(k))
                .collect();
            match w.state {
                WorkerState::Ready | WorkerState::Starting => {}
                _ if open.is_empty() => continue,
                _ => return None,
            }
            let speed = self
                .hosts
                .get(&w.host)
                .and_then(|h| h.speed)
                .filter(|s| *s > 0.0)
                .unwrap_or(1.0);
            let mut free = t;
            for (i, (ticket, _)) in open.iter().enumerate() {
                let est = self.history.estimate(&self.tasks[ticket].step)? / speed;
                free = match (i, w.front_since) {
                    (0, Some(since)) => (since.as_secs_f64() + est).max(t),
                    _ => free + est,
                };
            }
            hosts.push(Host {
                free_in: free - t,
                speed,
            });
        }
        Some(hosts)
    }
}
