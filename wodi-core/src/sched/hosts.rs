//! The run's hosts: granted, lost, suspended and resumed; how many it holds
//! (the desired count per class, requests for the missing ones), giving
//! hosts back, and the fewest-hosts estimate.

use std::collections::BTreeMap;

use carmi_proto::ids::HostId;

use super::{Class, Host, LossCause, Output, Sched, Time, WorkerState};
use crate::ids::StepId;
use crate::plan::fewest_hosts;
use crate::stats::HostRecord;

impl Sched {
    /// The fewest hosts, given the speeds of those held now (and speed 1 for
    /// hosts of unknown speed), with which `steps` would finish within
    /// `1 + tolerance` times their longest: the best cycle any number of
    /// hosts can give. `None` until every step has history.
    pub fn fewest_hosts(&self, steps: &[StepId], tolerance: f64) -> Option<u32> {
        let work: Option<Vec<f64>> = steps.iter().map(|s| self.history.estimate(s)).collect();
        let work = work?;
        let mut speeds: Vec<f64> = self
            .hosts
            .values()
            .map(|h| h.speed.unwrap_or(1.0))
            .collect();
        // Hosts not held yet are assumed as fast as the slowest held one.
        let slowest = speeds.iter().copied().fold(f64::INFINITY, f64::min);
        let fill = if slowest.is_finite() { slowest } else { 1.0 };
        speeds.resize(speeds.len().max(work.len()), fill);
        Some(fewest_hosts(&work, &speeds, tolerance) as u32)
    }

    /// [`Sched::fewest_hosts`] over several classes: the hosts each class
    /// may hold (at most `asked` of it: those held, fastest first, then
    /// hosts not held yet, as fast as the class's slowest held one, or its
    /// declared speed in `declared`, or the run's slowest), pooled fastest
    /// first; the fewest of them with which `steps` finish within
    /// `1 + tolerance` times their longest, counted per class. So the
    /// faster class is kept and the slower one given back first. At least
    /// one host in all. `None` until every step has history.
    pub fn fewest_hosts_by_class(
        &self,
        steps: &[StepId],
        tolerance: f64,
        asked: &BTreeMap<String, u32>,
        declared: &BTreeMap<String, f64>,
    ) -> Option<BTreeMap<String, u32>> {
        let work: Vec<f64> = steps
            .iter()
            .map(|s| self.history.estimate(s))
            .collect::<Option<_>>()?;
        Some(self.fewest_hosts_for_work(&work, tolerance, asked, declared))
    }

    /// The estimates of those of `steps` that have history (the work known
    /// so far of a cycle still being learned).
    pub fn known_work(&self, steps: &[StepId]) -> Vec<f64> {
        steps
            .iter()
            .filter_map(|s| self.history.estimate(s))
            .collect()
    }

    /// [`Sched::fewest_hosts_by_class`] for steps of the given `work`
    /// (speed-1 seconds each) rather than named steps.
    pub fn fewest_hosts_for_work(
        &self,
        work: &[f64],
        tolerance: f64,
        asked: &BTreeMap<String, u32>,
        declared: &BTreeMap<String, f64>,
    ) -> BTreeMap<String, u32> {
        let speed_of = |h: &Host| h.speed.unwrap_or(1.0);
        let slowest_held = self
            .hosts
            .values()
            .map(speed_of)
            .fold(f64::INFINITY, f64::min);
        let mut pool: Vec<(f64, &str)> = Vec::new();
        for (class, &count) in asked {
            let mut speeds: Vec<f64> = self
                .hosts
                .values()
                .filter(|h| h.class == *class)
                .map(speed_of)
                .collect();
            let slowest = speeds.iter().copied().fold(f64::INFINITY, f64::min);
            let fill = [
                slowest,
                declared.get(class).copied().unwrap_or(f64::NAN),
                slowest_held,
            ]
            .into_iter()
            .find(|s| s.is_finite())
            .unwrap_or(1.0);
            speeds.resize(speeds.len().max(work.len()), fill);
            speeds.sort_by(|a, b| b.total_cmp(a));
            speeds.truncate(count as usize);
            pool.extend(
                speeds
                    .into_iter()
                    .filter(|s| *s > 0.0)
                    .map(|s| (s, class.as_str())),
            );
        }
        // Stable: among equally fast hosts, the classes' order decides.
        pool.sort_by(|a, b| b.0.total_cmp(&a.0));
        let speeds: Vec<f64> = pool.iter().map(|(s, _)| *s).collect();
        let k = fewest_hosts(work, &speeds, tolerance).max(1);
        let mut counts: BTreeMap<String, u32> = asked.keys().map(|c| (c.clone(), 0)).collect();
        match pool.first() {
            Some(_) => {
                for (_, class) in pool.iter().take(k) {
                    *counts.get_mut(*class).expect("a class asked for") += 1;
                }
            }
            None => {
                if let Some(first) = counts.values_mut().next() {
                    *first = 1;
                }
            }
        }
        counts
    }

    /// How many hosts class `name` should hold now (0 for an unknown class).
    pub fn class_desired(&self, name: &str) -> u32 {
        self.classes.get(name).map_or(0, |c| c.desired)
    }

    /// Sets how many hosts class `name` should hold (adding the class if new):
    /// asks for the missing ones, releases idle surplus ones.
    pub fn set_class(&mut self, name: &str, desired: u32, now: Time) {
        self.classes
            .entry(name.to_string())
            .or_insert(Class {
                desired,
                requested: 0,
                waiting_retry: false,
            })
            .desired = desired;
        self.top_up(name);
        let held: Vec<HostId> = self
            .hosts
            .iter()
            .filter(|(_, h)| h.class == name)
            .map(|(id, _)| *id)
            .collect();
        let mut surplus = held.len().saturating_sub(desired as usize);
        for host in held.into_iter().rev() {
            if surplus == 0 {
                break;
            }
            let idle = match self.hosts[&host].worker {
                Some(w) => self.workers[&w].in_hand.is_empty(),
                None => true,
            };
            if idle {
                self.release(host, now);
                surplus -= 1;
            }
        }
    }

    /// Gives a held host back: it leaves the run as released (not lost),
    /// and its worker's tickets, if any, are queued again.
    pub(super) fn release(&mut self, host: HostId, now: Time) {
        let Some(h) = self.hosts.remove(&host) else {
            return;
        };
        self.records.hosts[h.record].end(now, false);
        if let Some(w) = h.worker {
            self.drop_worker(w, LossCause::HostGone, now);
        }
        self.outputs.push_back(Output::ReleaseHost { host });
    }

    /// Requests hosts so that held + requested reaches the desired count.
    pub(super) fn top_up(&mut self, name: &str) {
        if self.finished {
            return;
        }
        let held = self.hosts.values().filter(|h| h.class == name).count() as u32;
        let unserved = if self.cfg.release_idle {
            self.unserved()
        } else {
            u32::MAX
        };
        let Some(class) = self.classes.get_mut(name) else {
            return;
        };
        if class.waiting_retry {
            return;
        }
        let missing = class
            .desired
            .saturating_sub(held + class.requested)
            .min(unserved);
        if missing > 0 {
            class.requested += missing;
            self.outputs.push_back(Output::RequestHosts {
                class: name.to_string(),
                count: missing,
            });
        }
    }

    /// Asks again for the hosts `class` is missing (after a request the pool
    /// could not serve for the moment).
    pub fn request_missing(&mut self, class: &str) {
        if let Some(c) = self.classes.get_mut(class) {
            c.waiting_retry = false;
        }
        self.top_up(class);
    }

    /// A host request for `class` failed as unavailable for the moment:
    /// `count` hosts were never granted, and none is asked for again before
    /// [`Sched::request_missing`] (the caller's retry timer).
    pub fn hosts_unavailable(&mut self, class: &str, count: u32, now: Time) {
        self.hosts_not_granted(class, count, now);
        if let Some(c) = self.classes.get_mut(class) {
            c.waiting_retry = true;
        }
    }

    /// A host request for `class` ended with `count` hosts never granted
    /// (refused or cancelled). They are not asked for again until the class
    /// changes or a host is lost, so that a refusing pool is not hammered.
    pub fn hosts_not_granted(&mut self, class: &str, count: u32, _now: Time) {
        if let Some(c) = self.classes.get_mut(class) {
            c.requested = c.requested.saturating_sub(count);
        }
    }

    /// The pool granted `host` to `class`: a worker is spawned on it, or it is
    /// released if the class is already full (or the run finished).
    pub fn host_added(&mut self, host: HostId, class: &str, speed: Option<f64>, now: Time) {
        let held = self.hosts.values().filter(|h| h.class == class).count() as u32;
        let wanted = match self.classes.get_mut(class) {
            Some(c) => {
                c.requested = c.requested.saturating_sub(1);
                held < c.desired
            }
            None => false,
        };
        if self.finished || !wanted || self.hosts.contains_key(&host) {
            self.outputs.push_back(Output::ReleaseHost { host });
            return;
        }
        if self.given_back.retired.contains(&host) {
            // The pool offered a host fast abort retired (its exclusion,
            // `Output::ExcludeHost`, failed or came too late): back it goes,
            // and another is asked for.
            self.given_back.retired_offers += 1;
            self.outputs.push_back(Output::ReleaseHost { host });
            self.top_up(class);
            return;
        }
        self.unpark(speed);
        self.records.hosts.push(HostRecord::new(host, class, now));
        self.hosts.insert(
            host,
            Host {
                class: class.to_string(),
                worker: None,
                suspended: false,
                crashes_in_a_row: 0,
                speed,
                record: self.records.hosts.len() - 1,
            },
        );
        self.spawn_on(host, now);
    }

    /// The host is gone (taken back, lost or released): its worker is lost
    /// with it, and a replacement is requested.
    pub fn host_lost(&mut self, host: HostId, now: Time) {
        let Some(h) = self.hosts.remove(&host) else {
            return;
        };
        self.records.hosts[h.record].end(now, !self.finished);
        if let Some(w) = h.worker {
            self.drop_worker(w, LossCause::HostGone, now);
        }
        self.top_up(&h.class);
        self.dispatch_all(now);
    }

    /// The pool says `host` is not the run's (a spawn on it was refused
    /// with `NotYourHost`, as after a global RM restart that forgot the
    /// grant): it leaves the run like a lost host, its worker's steps go
    /// back to the queue uncounted, but it is not asked for again here. The
    /// caller asks again after its retry delay, so that a pool that keeps
    /// refusing does not make a tight loop of spawns. Returns its class.
    pub fn host_refused(&mut self, host: HostId, now: Time) -> Option<String> {
        let h = self.hosts.remove(&host)?;
        self.records.hosts[h.record].end(now, !self.finished);
        if let Some(w) = h.worker {
            self.drop_worker(w, LossCause::HostGone, now);
        }
        self.dispatch_all(now);
        Some(h.class)
    }

    /// The host's owner came back: its worker stops computing.
    pub fn host_suspended(&mut self, host: HostId, now: Time) {
        let Some(h) = self.hosts.get_mut(&host) else {
            return;
        };
        if h.suspended {
            return;
        }
        h.suspended = true;
        self.records.hosts[h.record].suspended.push((now, None));
        if let Some(w) = h.worker.and_then(|w| self.workers.get_mut(&w))
            && w.state != WorkerState::Detached
        {
            w.pace.interrupted();
            let deadline = (!w.in_hand.is_empty() || self.cfg.release_suspended)
                .then(|| now + self.cfg.suspend_timeout);
            if w.state != WorkerState::Starting || deadline.is_some() {
                w.state = WorkerState::Suspended { deadline };
            }
        }
        if let Some(w) = h.worker {
            self.touch(w);
        }
    }

    /// The host is free again: its worker goes on (it may still answer steps
    /// that were re-sent meanwhile; the first answer wins).
    pub fn host_resumed(&mut self, host: HostId, now: Time) {
        let Some(h) = self.hosts.get_mut(&host) else {
            return;
        };
        if !h.suspended {
            return;
        }
        h.suspended = false;
        if let Some(period) = self.records.hosts[h.record].suspended.last_mut() {
            period.1 = Some(now);
        }
        if let Some(w) = h.worker.and_then(|w| self.workers.get_mut(&w))
            && matches!(w.state, WorkerState::Suspended { .. })
        {
            // Suspended before it connected, it is still starting.
            w.state = if w.joined {
                WorkerState::Ready
            } else {
                WorkerState::Starting
            };
            // The suspension is not the worker's slowness: its clock restarts.
            if w.front_since.is_some() {
                w.front_since = Some(now);
            }
            if !w.spawned {
                w.spawned = true;
                let worker = h.worker.expect("looked up above");
                self.outputs.push_back(Output::Spawn { host, worker });
            }
        }
        if let Some(w) = h.worker {
            self.touch(w);
        }
        self.dispatch_all(now);
    }
}
