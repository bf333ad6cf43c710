//! The core's policies for not wasting hosts, each switched by a field of
//! [`SchedConfig`](super::SchedConfig) and each a decision the driver carries
//! out with the ordinary outputs (`ReleaseHost`, `RequestHosts`, `Assign`,
//! and `ExcludeHost` for fast abort):
//!
//! - **Release idle hosts in a cycle's tail** (`release_idle`): when the
//!   queue is empty and the steps still running will take longer than
//!   getting a host back costs (`reacquire`, the wait for a new worker, plus
//!   `grant_cost`, what a grant costs the pool), a host with nothing to do
//!   goes back to the pool, and hosts are asked for again only as queued
//!   steps need them (at the next cycle). A shorter tail is cheaper to sit
//!   out than to pay for a grant: the host is kept. Occupancy then follows
//!   the work where it pays, without a grant per host and cycle.
//! - **Release suspended hosts** (`release_suspended`): once a suspended
//!   host's grace is over, it is given back (its steps are queued again) and
//!   a replacement is asked for, instead of staying allocated while its owner
//!   works.
//! - **Straggler copies** (`stragglers`): in the tail, an idle host starts a
//!   second copy of the step expected to finish last if it would clearly
//!   finish it sooner (or if its only copy is on a suspended host). The first
//!   result is delivered, the other discarded: exactly once holds because
//!   delivery is per ticket.
//! - **Fast abort** (`fast_abort`): a step running `factor` times longer
//!   than its estimate on its host is sent again and is a strike against the
//!   worker; two strikes and the worker's host is given back and replaced.
//!   The host is excluded first (`ExcludeHost`), so that the pool never
//!   grants it to the class again, not even to the request for its
//!   replacement.
//!
//! Everything here is pure: decisions depend on the times passed in.

use std::time::Duration;

use carmi_proto::ids::HostId;

use super::{Sched, Ticket, Time, WorkerState};
use crate::ids::{StepId, WorkerId};

/// A straggler copy must beat the running copy by this fraction of its own
/// expected time, so that estimate noise does not double the work.
const STRAGGLER_MARGIN: f64 = 0.1;

/// Most copies of one step while every copy is on a suspended host: an
/// idle host may add one more copy to such a step, up to this many.
const MAX_STUCK_COPIES: usize = 3;

/// Strikes after which fast abort retires a worker.
const STRIKES: u32 = 2;

impl Sched {
    /// Queued tickets that no free slot of a ready or starting worker will take:
    /// how many more hosts the work in hand could use.
    pub(super) fn unserved(&self) -> u32 {
        let free: usize = self
            .workers
            .values()
            .filter(|w| matches!(w.state, WorkerState::Ready | WorkerState::Starting))
            .map(|w| self.window_of(w).saturating_sub(w.in_hand.len()))
            .sum();
        u32::try_from(self.queue.len().saturating_sub(free)).unwrap_or(u32::MAX)
    }

    /// Whether `took` on a host of `speed` is too slow for `step` by the
    /// fast-abort factor (false when fast abort is off or the step is new).
    pub(super) fn too_slow(&self, step: StepId, took: Duration, speed: f64) -> bool {
        let (Some(factor), Some(est)) = (self.cfg.fast_abort, self.history.estimate(&step)) else {
            return false;
        };
        took.as_secs_f64() > factor * est / speed.max(1e-9)
    }

    /// When the step a ready worker computes becomes overdue for fast abort.
    fn overdue_at(&self, worker: WorkerId) -> Option<Time> {
        let factor = self.cfg.fast_abort?;
        let w = self.workers.get(&worker)?;
        if w.state != WorkerState::Ready || w.front_struck {
            return None;
        }
        let since = w.front_since?;
        let (ticket, _) = w.in_hand.front()?;
        let task = self.tasks.get(ticket)?;
        let est = self.history.estimate(&task.step)?;
        let speed = self.speed_of(w.host);
        Some(since + Duration::from_secs_f64((factor * est / speed).clamp(0.0, 1e9)))
    }

    /// The earliest time a running step becomes overdue (fast abort).
    pub(super) fn abort_deadline(&self) -> Option<Time> {
        self.cfg.fast_abort?;
        self.workers
            .keys()
            .filter_map(|w| self.overdue_at(*w))
            .min()
    }

    /// Fast abort: every step past its allowance is sent again and strikes
    /// its worker.
    pub(super) fn check_overdue(&mut self, now: Time) {
        if self.cfg.fast_abort.is_none() {
            return;
        }
        let late: Vec<WorkerId> = self
            .workers
            .keys()
            .copied()
            .filter(|w| self.overdue_at(*w).is_some_and(|d| d <= now))
            .collect();
        for worker in late {
            let Some(w) = self.workers.get_mut(&worker) else {
                continue;
            };
            w.front_struck = true;
            let ticket = w.in_hand.front().map(|(t, _)| *t);
            if let Some(ticket) = ticket {
                self.requeue_front(ticket);
            }
            self.strike(worker, now);
        }
    }

    /// One more strike against `worker`; at the limit its host is excluded
    /// from its class and goes back (its steps are queued again), and a
    /// replacement is asked for.
    pub(super) fn strike(&mut self, worker: WorkerId, now: Time) {
        let Some(w) = self.workers.get_mut(&worker) else {
            return;
        };
        w.strikes += 1;
        if w.strikes < STRIKES {
            return;
        }
        let host = w.host;
        let Some(class) = self.hosts.get(&host).map(|h| h.class.clone()) else {
            return;
        };
        tracing::info!(%worker, %host, "retiring a worker that ran much slower than its host's speed twice");
        self.given_back.retired.insert(host);
        // Excluded before it goes back: the request for its replacement
        // (or one still pending) would take it again otherwise.
        self.outputs.push_back(super::Output::ExcludeHost {
            class: class.clone(),
            host,
        });
        self.release(host, now);
        self.top_up(&class);
    }

    /// Gives back suspended hosts whose grace is over and asks for replacements.
    pub(super) fn release_suspended(&mut self, hosts: Vec<HostId>, now: Time) {
        for host in hosts {
            let Some((class, record)) = self.hosts.get(&host).map(|h| (h.class.clone(), h.record))
            else {
                continue;
            };
            // Its owner took it: a loss in the statistics, although the run
            // lets go of it before CARMI would vacate it.
            self.records.hosts[record].end(now, true);
            tracing::info!(%host, "giving back a host suspended past its grace");
            self.release(host, now);
            self.top_up(&class);
        }
    }

    /// Speeds of the parked hosts asked for again and not granted yet.
    pub(super) fn coming(&self) -> Vec<f64> {
        if !self.cfg.release_idle {
            return Vec::new();
        }
        let requested: u32 = self.classes.values().map(|c| c.requested).sum();
        self.given_back
            .parked
            .iter()
            .take(requested as usize)
            .copied()
            .collect()
    }

    /// A host was granted: it is (most likely) one of the parked ones.
    pub(super) fn unpark(&mut self, speed: Option<f64>) {
        if self.given_back.parked.is_empty() {
            return;
        }
        let speed = speed.unwrap_or(1.0);
        let i = self
            .given_back
            .parked
            .iter()
            .position(|s| (s - speed).abs() < 1e-9)
            .unwrap_or(0);
        self.given_back.parked.remove(i);
    }

    fn is_open(&self, ticket: &Ticket) -> bool {
        self.tasks.contains_key(ticket)
    }

    fn speed_of(&self, host: HostId) -> f64 {
        self.hosts
            .get(&host)
            .and_then(|h| h.speed)
            .filter(|s| *s > 0.0)
            .unwrap_or(1.0)
    }

    /// When the copy of `ticket` held by `worker` should end: `None` when
    /// unknown (no estimate, or queued behind another step), infinity when
    /// its worker is suspended.
    fn copy_end(&self, ticket: Ticket, worker: WorkerId, now: f64) -> Option<f64> {
        let w = self.workers.get(&worker)?;
        if matches!(w.state, WorkerState::Suspended { .. }) {
            return Some(f64::INFINITY);
        }
        if w.in_hand.front().map(|(t, _)| *t) != Some(ticket) {
            return None;
        }
        let est = self.history.estimate(&self.tasks.get(&ticket)?.step)?;
        let since = w.front_since?.as_secs_f64();
        let expected = est / self.speed_of(w.host);
        let elapsed = now - since;
        // Past its estimate by a ratio r, a copy is assumed to need r times
        // what it has run: a little late is noise, far late is a host slower
        // than it claims.
        Some(if elapsed > expected && expected > 0.0 {
            since + elapsed * (elapsed / expected)
        } else {
            since + expected
        })
    }

    /// The tail policies: with nothing queued while steps still run, idle
    /// hosts start straggler copies or go back to the pool.
    pub(super) fn settle_idle(&mut self, now: Time) {
        if self.finished
            || !(self.cfg.release_idle || self.cfg.stragglers)
            || !self.queue.is_empty()
        {
            return;
        }
        let idle = self.idle_workers();
        if idle.is_empty() {
            return;
        }
        let t_now = now.as_secs_f64();
        let mut running = self.running_tickets(t_now);
        if running.is_empty() {
            // Between cycles: the master is about to submit the next one.
            return;
        }
        let mut leftover = Vec::new();
        for (worker, speed, empty) in idle {
            if self.cfg.stragglers
                && empty
                && self.copy_straggler(worker, speed, &mut running, t_now, now)
            {
                continue;
            }
            leftover.push(worker);
        }
        if !self.cfg.release_idle
            || leftover.is_empty()
            || !self.tail_outlasts_regrant(&running, t_now)
        {
            return;
        }
        self.park(leftover, now);
    }

    /// Ready workers with nothing useful in hand (empty, or only copies
    /// whose ticket another copy already answered), fastest first: each
    /// with its speed and whether its hands are empty.
    fn idle_workers(&self) -> Vec<(WorkerId, f64, bool)> {
        let mut idle: Vec<(WorkerId, f64, bool)> = self
            .workers
            .iter()
            .filter(|(_, w)| {
                w.state == WorkerState::Ready && !w.in_hand.iter().any(|(t, _)| self.is_open(t))
            })
            .map(|(id, w)| (*id, self.speed_of(w.host), w.in_hand.is_empty()))
            .collect();
        idle.sort_by(|a, b| b.1.total_cmp(&a.1));
        idle
    }

    /// Every open ticket with a copy running, with its copies and when it
    /// should end (the earliest copy; `None` when unknown), by ticket.
    fn running_tickets(&self, t_now: f64) -> Vec<(Ticket, Vec<WorkerId>, Option<f64>)> {
        let mut running: Vec<(Ticket, Vec<WorkerId>, Option<f64>)> = self
            .tasks
            .iter()
            .filter(|(_, task)| !task.copies.is_empty())
            .map(|(t, task)| {
                let ends: Option<Vec<f64>> = task
                    .copies
                    .iter()
                    .map(|c| self.copy_end(*t, *c, t_now))
                    .collect();
                let end = ends.map(|e| e.into_iter().fold(f64::INFINITY, f64::min));
                (*t, task.copies.clone(), end)
            })
            .collect();
        running.sort_by_key(|r| r.0);
        running
    }

    /// Whether the cycle's tail (`running`) lasts longer than getting hosts
    /// back would take, so that idle hosts are worth giving back.
    fn tail_outlasts_regrant(
        &self,
        running: &[(Ticket, Vec<WorkerId>, Option<f64>)],
        t_now: f64,
    ) -> bool {
        // A step whose only copies are on suspended hosts will need a host
        // when their grace ends: keep the idle ones for it.
        let awaits_host = running.iter().any(|(t, copies, _)| {
            copies.iter().all(|c| {
                self.workers
                    .get(c)
                    .is_some_and(|w| matches!(w.state, WorkerState::Suspended { .. }))
            }) && self.is_open(t)
        });
        if awaits_host {
            return false;
        }
        // A step without an estimate (the first cycle) makes the tail
        // unknown: long, unless grants cost something, in which case the host
        // is kept for the next cycle rather than paid for again on a guess.
        let unknown = if self.cfg.grant_cost.is_zero() {
            f64::INFINITY
        } else {
            0.0
        };
        let tail = running
            .iter()
            .map(|r| r.2.map_or(unknown, |e| e - t_now))
            .fold(0.0, f64::max);
        // Keeping the idle hosts costs them the tail; giving them back costs
        // the wait for new ones and what a grant costs the pool.
        tail > (self.cfg.reacquire + self.cfg.grant_cost).as_secs_f64()
    }

    /// Gives the hosts of idle `workers` back, remembering their speeds
    /// ([`Sched::coming`] counts on hosts like them for the next cycle).
    fn park(&mut self, workers: Vec<WorkerId>, now: Time) {
        for worker in workers {
            let Some(host) = self.workers.get(&worker).map(|w| w.host) else {
                continue;
            };
            // A request still pending for the class would take the host
            // straight back from the pool: withdraw it first (the next
            // cycle's steps ask again).
            if let Some(class) = self.hosts.get(&host).map(|h| h.class.clone())
                && let Some(c) = self.classes.get_mut(&class)
                && c.requested > 0
            {
                c.requested = 0;
                self.outputs
                    .push_back(crate::sched::Output::CancelRequests { class });
            }
            self.given_back.parked.push(self.speed_of(host));
            self.release(host, now);
        }
        self.given_back.parked.sort_by(|a, b| b.total_cmp(a));
        // Hosts lost rather than granted back leave entries behind: never
        // expect more than the run wants.
        let desired: u32 = self.classes.values().map(|c| c.desired).sum();
        self.given_back.parked.truncate(desired as usize);
    }

    /// Starts a second copy of the step expected to end last on `worker` if
    /// that copy would end clearly sooner; returns whether it did.
    fn copy_straggler(
        &mut self,
        worker: WorkerId,
        speed: f64,
        running: &mut [(Ticket, Vec<WorkerId>, Option<f64>)],
        t_now: f64,
        now: Time,
    ) -> bool {
        let mut best: Option<(usize, f64)> = None;
        for (i, (ticket, copies, end)) in running.iter().enumerate() {
            let Some(end) = *end else {
                continue;
            };
            // One copy per step, except for a step whose every copy sits on
            // a suspended host: it would otherwise wait out the suspend
            // grace while this host idles (bounded, in case those resume).
            let stuck = end.is_infinite() && copies.len() < MAX_STUCK_COPIES;
            if (copies.len() != 1 && !stuck) || copies.contains(&worker) {
                continue;
            }
            let mine = self
                .history
                .estimate(&self.tasks[ticket].step)
                .map(|est| est / speed);
            let wins = match mine {
                Some(d) => t_now + d * (1.0 + STRAGGLER_MARGIN) < end,
                // No estimate: only a step stuck on a suspended host is worth it.
                None => end.is_infinite(),
            };
            if wins && best.is_none_or(|(_, e)| end > e) {
                best = Some((i, end));
            }
        }
        let Some((i, _)) = best else {
            return false;
        };
        let ticket = running[i].0;
        running[i].1.push(worker);
        self.assign(ticket, worker, now);
        true
    }
}

#[cfg(test)]
#[path = "policy_tests.rs"]
mod tests;
