//! Jobs no set of machines in the pool could start (issue 15, item 2): a
//! job whose minimums the online slots cannot meet at once, in any state
//! (an owner's slot comes back; a lost machine may not), waits flagged
//! ("cannot start: class X needs 9, the pool has 8 matching") and keeps
//! nothing back from the jobs behind it or from the growth of running jobs:
//! otherwise one impossible request stops the queue for good.
//!
//! The answer depends only on the online slots, the machines' ads and the
//! job's classes, so it is kept per job and computed again only after one of
//! those changed (`Verdicts::pool_gen`). Only waiting jobs are asked, and
//! their classes change only when a held job is released (run-time classes,
//! exclusions and `DelHosts` come from a running job's processes). A shrinking pool may make a job
//! that kept slots impossible: the queue is then settled again, so that the
//! jobs behind it see the slots it no longer keeps.

use std::collections::HashMap;

use carmi_proto::ids::{HostId, JobId};

use super::Allocator;
use super::job::{Job, member};
use super::matching::match_all;
use super::pool::MachineIdx;

/// What is known of which waiting jobs could ever start.
#[derive(Default)]
pub(super) struct Verdicts {
    /// Bumped whenever online slots, machine ads, exclusions or a job's
    /// classes change: which jobs could ever start is computed again.
    pub(super) pool_gen: u64,
    /// Verdicts by cluster of waiting jobs, as of `pool_gen` (cleared when
    /// it moves): `None` inside when the cluster's jobs could start.
    pub(super) by_cluster: HashMap<u64, Option<String>>,
    /// Verdicts worked out over the online slots (see
    /// [`Allocator::possible_judged`]).
    pub(super) judged: u64,
}

impl Verdicts {
    /// The pool changed: every verdict is stale.
    fn invalidate(&mut self) {
        self.pool_gen += 1;
        self.by_cluster.clear();
    }
}

/// Why `job` cannot start on `online`, given a membership test by class name
/// and host: the first class with more minimum than matching slots, else
/// all classes together (they overlap on too few slots). `None` when it can.
fn why_impossible(
    needs: &[(String, u32)],
    online: &[HostId],
    mut is_member: impl FnMut(&str, HostId) -> bool,
) -> Option<String> {
    let total: u64 = needs.iter().map(|&(_, min)| u64::from(min)).sum();
    if total > online.len() as u64 {
        return Some(format!(
            "cannot start: needs {total} machines at once; the pool has {} slots online",
            online.len()
        ));
    }
    let lists: Vec<Vec<usize>> = needs
        .iter()
        .map(|(c, _)| {
            (0..online.len())
                .filter(|&i| is_member(c, online[i]))
                .collect()
        })
        .collect();
    for ((class, min), list) in needs.iter().zip(&lists) {
        if (list.len() as u32) < *min {
            return Some(format!(
                "cannot start: class {class} needs {min}, the pool has {} matching",
                list.len()
            ));
        }
    }
    if needs.len() < 2 {
        return None;
    }
    let class_of: Vec<usize> = needs
        .iter()
        .enumerate()
        .flat_map(|(k, &(_, min))| std::iter::repeat_n(k, min as usize))
        .collect();
    if match_all(&lists, &class_of, online.len()).is_some() {
        return None;
    }
    let any = (0..online.len())
        .filter(|&i| lists.iter().any(|l| l.binary_search(&i).is_ok()))
        .count();
    Some(format!(
        "cannot start: its classes need {total} machines at once, the pool has {any} matching one of them"
    ))
}

/// The classes with a minimum, and the minimum.
fn minimums(job: &Job) -> Vec<(String, u32)> {
    job.limits
        .iter()
        .filter(|&(_, &(min, _))| min > 0)
        .map(|(c, &(min, _))| (c.clone(), min))
        .collect()
}

impl Allocator {
    /// Why `job` cannot start in the pool as it is, whatever the other jobs
    /// hold (`carmi q` shows it); `None` when some set of online slots meets
    /// its minimums, or the job is unknown.
    pub fn impossible(&self, job: JobId) -> Option<String> {
        let j = self.jobs.get(&job)?;
        if let Some((generation, why)) = &j.possible
            && *generation == self.verdicts.pool_gen
        {
            return why.clone();
        }
        // Not tried since the pool changed: evaluated without the
        // membership caches, which need `&mut`.
        let online = self.pool.online_hosts();
        why_impossible(&minimums(j), &online, |class, host| {
            let m = self.pool.get_slot(host).machine;
            j.classes[class].admits(m, self.pool.machine(m), &j.ad)
        })
    }

    /// True when some set of online slots meets `job`'s minimums; kept
    /// until the pool or the job's classes change.
    pub(super) fn possible(&mut self, job: JobId) -> bool {
        let Some(j) = self.jobs.get(&job) else {
            return false;
        };
        if let Some((generation, why)) = &j.possible
            && *generation == self.verdicts.pool_gen
        {
            return why.is_none();
        }
        // Jobs of one cluster ask for the same (see `queue`): one verdict serves all.
        let cluster = self.waiting.of(job);
        if let Some(why) = cluster
            .and_then(|c| self.verdicts.by_cluster.get(&c))
            .cloned()
        {
            let ok = why.is_none();
            if let Some(j) = self.jobs.get_mut(&job) {
                j.possible = Some((self.verdicts.pool_gen, why));
            }
            return ok;
        }
        let needs = minimums(j);
        self.verdicts.judged += 1;
        let online = self.pool.online_hosts();
        let why = {
            let (jobs, machines, slots) = (&mut self.jobs, &self.pool.machines, &self.pool.slots);
            let clock = self.clock.unix;
            why_impossible(&needs, &online, |class, host| {
                member(
                    jobs,
                    machines,
                    clock,
                    job,
                    class,
                    slots[host.0 as usize - 1].machine,
                )
            })
        };
        let ok = why.is_none();
        if let Some(c) = cluster {
            self.verdicts.by_cluster.insert(c, why.clone());
        }
        if let Some(j) = self.jobs.get_mut(&job) {
            j.possible = Some((self.verdicts.pool_gen, why));
        }
        ok
    }

    /// How many times a verdict of [`Allocator::possible`] was worked out
    /// over the online slots rather than taken from what is kept: what a
    /// test reads to see that a change costs what it touches.
    pub fn possible_judged(&self) -> u64 {
        self.verdicts.judged
    }

    /// Brings the verdict of every waiting job up to date (one evaluation
    /// per cluster, with the membership caches), so that
    /// [`Allocator::impossible`] answers `carmi q` from them, however long
    /// the queue.
    pub fn judge_waiting(&mut self) {
        let waiting: Vec<JobId> = self.waiting.queue.values().copied().collect();
        for job in waiting {
            self.possible(job);
        }
    }

    /// The pool (online slots, ads, exclusions) or a job's classes changed:
    /// what was known about which jobs could ever start is stale.
    pub(super) fn pool_changed(&mut self) {
        self.verdicts.invalidate();
    }

    /// Whether machine `m` belongs to each class with a minimum of the first
    /// job of every cluster whose verdict is kept, by the machine's current
    /// ad: taken before and after an ad changes, so that only the clusters
    /// it changed anything for are judged again ([`Allocator::ad_changed`]).
    pub(super) fn kept_membership(&mut self, m: MachineIdx) -> Vec<(u64, Vec<bool>)> {
        let mut clusters: Vec<u64> = self.verdicts.by_cluster.keys().copied().collect();
        clusters.sort_unstable();
        let mut out = Vec::with_capacity(clusters.len());
        for c in clusters {
            let Some(job) = self.waiting.first_job(c) else {
                continue;
            };
            let Some(j) = self.jobs.get(&job) else {
                continue;
            };
            let bits = minimums(j)
                .into_iter()
                .map(|(class, _)| {
                    member(
                        &mut self.jobs,
                        &self.pool.machines,
                        self.clock.unix,
                        job,
                        &class,
                        m,
                    )
                })
                .collect();
            out.push((c, bits));
        }
        out
    }

    /// Machine `m`'s ad changed (its slots online before and after, as
    /// many): a kept verdict depends on the pool only through which online
    /// slots belong to the cluster's classes, so it still holds for every
    /// cluster that `m` is a member of the same classes of as `before` says
    /// (from [`Allocator::kept_membership`]). Those are kept; the others,
    /// and every job's own verdict, are judged again. A heartbeat that
    /// changes `LoadAvg` then costs one evaluation per cluster, not one per
    /// online slot per cluster.
    pub(super) fn ad_changed(&mut self, m: MachineIdx, before: Vec<(u64, Vec<bool>)>) {
        let after: HashMap<u64, Vec<bool>> = self.kept_membership(m).into_iter().collect();
        let kept: HashMap<u64, Option<String>> = before
            .into_iter()
            .filter(|(c, bits)| after.get(c) == Some(bits))
            .filter_map(|(c, _)| self.verdicts.by_cluster.get(&c).map(|w| (c, w.clone())))
            .collect();
        self.pool_changed();
        self.verdicts.by_cluster = kept;
    }

    /// After the pool changed: a waiting job that kept slots from the jobs
    /// behind it and can no longer start keeps nothing now, so the queue is
    /// settled again.
    pub(super) fn recheck_reserving(&mut self) {
        let reserving: Vec<JobId> = self.waiting.reserving_jobs();
        if reserving.into_iter().any(|job| !self.possible(job)) {
            self.dirty = true;
        }
    }

    /// After the pool grew or changed: when the head of the queue is another
    /// job now (one ahead of it that could never start can now, without any
    /// slot becoming idle: a new machine's slots all went to pending
    /// requests), the idle slots kept from running jobs' growth are those
    /// the new head could use, so the queue is settled again.
    pub(super) fn recheck_head(&mut self, before: Option<JobId>) {
        if self.head() != before {
            self.dirty = true;
        }
    }

    /// Whether machine `m` belongs to each class with a minimum of each
    /// job that kept slots in the last pass, by the machine's current ad.
    pub(super) fn reserving_membership(&mut self, m: MachineIdx) -> Vec<bool> {
        let mut jobs = self.waiting.reserving_jobs();
        jobs.sort();
        let mut out = Vec::new();
        for job in jobs {
            let Some(j) = self.jobs.get(&job) else {
                continue;
            };
            for (class, _) in minimums(j) {
                out.push(member(
                    &mut self.jobs,
                    &self.pool.machines,
                    self.clock.unix,
                    job,
                    &class,
                    m,
                ));
            }
        }
        out
    }

    /// The first waiting job that could ever start: the one whose minimums
    /// idle slots are kept for, and which alone may take hosts from running jobs.
    pub(super) fn head(&mut self) -> Option<JobId> {
        // In pass order (users by priority, then submit order); jobs of one
        // cluster are possible or not alike, so their first one answers.
        let heads = self.waiting.heads();
        heads
            .into_values()
            .map(|(job, _)| job)
            .find(|&job| self.limits_allow(job) && self.possible(job))
    }
}
