//! How many hosts the run holds: the desired count per class, requests for
//! the missing ones, giving hosts back, and the fewest-hosts estimate.

use carmi_api::ids::HostId;

use super::{Class, LossCause, Output, Sched, Time};
use crate::ids::StepId;
use crate::plan::fewest_hosts;

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

    /// Sets how many hosts class `name` should hold (adding the class if new):
    /// asks for the missing ones, releases idle surplus ones.
    pub fn set_class(&mut self, name: &str, desired: u32, now: Time) {
        self.classes
            .entry(name.to_string())
            .or_insert(Class {
                desired,
                requested: 0,
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
        self.host_records[h.record].end(now, false);
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
        self.top_up(class);
    }

    /// A host request for `class` ended with `count` hosts never granted
    /// (refused or cancelled). They are not asked for again until the class
    /// changes or a host is lost, so that a refusing pool is not hammered.
    pub fn hosts_not_granted(&mut self, class: &str, count: u32, _now: Time) {
        if let Some(c) = self.classes.get_mut(class) {
            c.requested = c.requested.saturating_sub(count);
        }
    }
}
