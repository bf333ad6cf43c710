//! Fair share between users (issue 15, item 7): growth and rebalancing even
//! out the hosts held per *user* (the job's `Owner`: the submitting
//! identity when the pool has tokens, else the submit file's owner), each
//! weighted by the user's priority ([`crate::usage`]), and only then per job
//! within a user. A user who submits ten jobs gets no more of the pool than
//! one who submits one; a user who used much of it lately gets less.
//!
//! A user's *weight* is the hosts their running jobs hold times their
//! priority. Growth gives an idle slot to the hungry job whose user would
//! weigh least with it; a host above its job's minimum moves to a job of
//! another user only if the giver still weighs at least as much as the
//! taker afterwards (so every move lowers the sum of priority x held², and
//! moves end), and between jobs of one user when the giving job holds at
//! least two more (the per-job rule). Minimums are never taken.

use std::collections::BTreeMap;
use std::time::Duration;

use carmi_proto::ids::JobId;

use super::{Allocator, Phase};
use crate::usage::{Usage, UserUsage};

/// Usage is sampled at most this often: holdings between two samples are
/// taken as those at the second (close enough against a day's half-life).
const SAMPLE_EVERY: Duration = Duration::from_secs(1);

/// Hosts held per user by the jobs competing for growth.
pub(super) type Held = BTreeMap<String, u32>;

/// A job with room to grow: (hosts held, submit order, job, classes with room).
pub(super) type Hungry = (u32, u64, JobId, Vec<String>);

/// Longest accounting group name kept (`carmi userprio` takes user names
/// up to this long).
const MAX_USER: usize = 256;

/// The user `job`'s use of the pool is charged to, from its ad: HTCondor's
/// `AccountingGroup` (`group.user`) when set, else `AcctGroup` with
/// `AcctGroupUser` (or the owner) as `group.user`, else the owner. A name
/// that is not a string of 1 to 256 printable characters without spaces is
/// passed over, with a warning, for the owner.
///
/// As in HTCondor without an admin's `SUBMIT_REQUIREMENTS`, the submitter is
/// trusted to name a group it belongs to: the group only changes whose
/// share the job counts against, never who may act on it.
pub(super) fn accounting_user(ad: &classad::ClassAd, owner: &str) -> String {
    let text = |name: &str| {
        ad.get(name)?;
        ad.eval_attr(name).as_str().map(str::to_string)
    };
    let group = text("AccountingGroup").or_else(|| {
        let group = text("AcctGroup")?;
        let user = text("AcctGroupUser").unwrap_or_else(|| owner.to_string());
        Some(format!("{group}.{user}"))
    });
    match group {
        Some(g)
            if !g.is_empty()
                && g.len() <= MAX_USER
                && g.chars().all(|c| c.is_ascii_graphic() || !c.is_ascii()) =>
        {
            g
        }
        Some(g) => {
            let g: String = g.chars().take(64).collect();
            tracing::warn!(owner, group = %g, "accounting group passed over: it must be 1 to 256 printable characters without spaces");
            owner.to_string()
        }
        None => owner.to_string(),
    }
}

impl Allocator {
    /// The user the fair share charges `job` to (its accounting group, else
    /// its owner; empty for an unknown job): what `carmi userprio` lists.
    pub fn job_user(&self, job: JobId) -> &str {
        self.jobs.get(&job).map_or("", |j| &j.user)
    }

    /// Reads what the fair share and the concurrency limits need from `job`'s
    /// ad, once its attributes are set. A waiting job whose user or limits
    /// changed is filed again at its place in the queue, in the cluster of
    /// the jobs now like it.
    pub(super) fn read_share_attributes(&mut self, job: JobId) {
        // A running job's holdings are counted under the values it started
        // with: they stay until it stops.
        if self.running.contains(&job) {
            return;
        }
        let Some(j) = self.jobs.get_mut(&job) else {
            return;
        };
        let user = accounting_user(&j.ad, &j.owner);
        let needs = super::concurrency::needs_of(&j.ad);
        if user == j.user && needs == j.concurrency {
            return;
        }
        let requeue = j.phase == Phase::Waiting;
        j.user = user;
        j.concurrency = needs;
        if requeue {
            let seq = j.seq;
            self.dequeue(job, seq);
            self.enqueue(job);
            self.dirty = true;
        }
    }

    /// Hosts held per user by running submitted jobs (those that grow and
    /// give hosts back; jobs started by hand hold only what they asked for).
    pub(super) fn held_by_user(&self) -> Held {
        let mut held = Held::new();
        for id in &self.running {
            let n = self.jobs[id].hosts.len() as u32;
            *held.entry(self.job_user(*id).to_string()).or_default() += n;
        }
        held
    }

    /// How much `owner` would weigh holding `extra` more hosts than `held` says.
    pub(super) fn user_weight(&self, held: &Held, owner: &str, extra: i64) -> f64 {
        let n = i64::from(held.get(owner).copied().unwrap_or(0)) + extra;
        n.max(0) as f64 * self.usage.priority(owner)
    }

    /// Sorts hungry jobs (held, submit order, job, room) for growth: the
    /// job whose user would weigh least with one more host first, then the
    /// job holding fewest, then the older.
    pub(super) fn order_by_share(&self, hungry: &mut Vec<Hungry>) {
        let held = self.held_by_user();
        let mut keyed: Vec<(f64, Hungry)> = hungry
            .drain(..)
            .map(|h| (self.user_weight(&held, self.job_user(h.2), 1), h))
            .collect();
        keyed.sort_by(|a, b| a.0.total_cmp(&b.0).then_with(|| a.1.cmp(&b.1)));
        hungry.extend(keyed.into_iter().map(|(_, h)| h));
    }

    /// Whether a host above `donor`'s minimum may move to `taker` (see the
    /// module's rule).
    pub(super) fn may_move(&self, held: &Held, donor: JobId, taker: JobId) -> bool {
        let (d, t) = (self.job_user(donor), self.job_user(taker));
        if d == t {
            return self.jobs[&donor].hosts.len() > self.jobs[&taker].hosts.len() + 1;
        }
        self.user_weight(held, d, -1) >= self.user_weight(held, t, 1)
    }

    /// Accumulates usage up to now with the hosts each user holds (every
    /// job, started by hand or submitted), at most once per [`SAMPLE_EVERY`].
    pub(super) fn sample_usage(&mut self) {
        if self.clock.now < self.usage.at() + SAMPLE_EVERY {
            return;
        }
        let mut held = Held::new();
        for (&id, j) in &self.jobs {
            if !j.hosts.is_empty() && j.phase != Phase::Held {
                *held.entry(self.job_user(id).to_string()).or_default() += j.hosts.len() as u32;
            }
        }
        self.usage.advance(self.clock.now, &held);
    }

    /// Every user's usage and priority factor (for `carmi q` and the journal).
    pub fn usage(&self) -> &Usage {
        &self.usage
    }

    /// `user`'s usage and factor.
    pub fn user_usage(&self, user: &str) -> UserUsage {
        self.usage.user(user)
    }

    /// Sets the half-life usage decays with (the pool's configuration),
    /// keeping the usage so far.
    pub fn set_usage_half_life(&mut self, half_life: Duration) {
        let mut fresh = Usage::new(half_life);
        for (name, u) in self.usage.users() {
            fresh.restore(name, u.host_seconds);
            if u.factor != 1.0 {
                fresh.set_factor(name, u.factor);
            }
        }
        self.usage = fresh;
    }

    /// Sets `user`'s priority factor (an admin's `carmi userprio
    /// --set-factor`, or the journal's): shares are evened out again.
    pub fn set_user_factor(&mut self, user: &str, factor: f64) {
        self.usage.set_factor(user, factor);
        self.dirty = true;
    }

    /// Puts back a user's usage read from the journal after a restart.
    pub fn restore_usage(&mut self, user: &str, host_seconds: f64) {
        self.usage.restore(user, host_seconds);
    }
}
