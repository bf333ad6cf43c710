//! The waiting queue grouped by what jobs ask for, so that settling it costs
//! time in the number of *different* requests waiting, not in the number of
//! jobs (HTCondor's negotiator groups jobs into "autoclusters" for the same
//! reason).
//!
//! # Why skipping is exact
//! A settling pass goes through the waiting jobs in submit order, each with
//! the idle slots no job ahead of it could use for a minimum (see `jobs`).
//! That set only shrinks along the queue. Two jobs of one owner whose
//! classes have the same names, expressions and minimums are members of the
//! same classes of the same machines, so once the first fails to start, any
//! later one in the same pass faces a subset of the candidates and fails as
//! well, and removes no more slots from the set than the first did. Only the
//! first waiting job of each cluster is tried, then the next once it starts.
//!
//! Membership evaluates class expressions against the job's ad, which also
//! holds `JobId`: a job whose class expressions mention `JobId` is a cluster
//! of its own. (A machine `Requirements` telling jobs apart by `JobId` is not
//! seen; such a machine may be offered to a job one pass late.)

use std::collections::{BTreeMap, BTreeSet, HashMap};

use carmi_api::ids::JobId;

use super::{Allocator, Phase};
use crate::alloc::jobs::ClassLimits;

/// Waiting jobs by cluster.
#[derive(Debug, Default)]
pub(super) struct Clusters {
    /// Signature -> cluster id.
    by_signature: HashMap<String, u64>,
    /// Cluster id -> its signature and its waiting jobs by submit order.
    members: HashMap<u64, (String, BTreeSet<(u64, JobId)>)>,
    /// Each waiting job's cluster.
    of_job: HashMap<JobId, u64>,
    next: u64,
}

impl Clusters {
    /// Number of clusters (for tests and logs).
    pub(super) fn len(&self) -> usize {
        self.members.len()
    }

    /// Number of waiting jobs in clusters.
    pub(super) fn jobs(&self) -> usize {
        self.of_job.len()
    }

    /// Adds a job at the end of its cluster; true when the cluster is new
    /// (no identical job waits ahead of it).
    fn join(&mut self, job: JobId, seq: u64, signature: String) -> bool {
        let fresh = !self.by_signature.contains_key(&signature);
        let id = match self.by_signature.get(&signature) {
            Some(&id) => id,
            None => {
                let id = self.next;
                self.next += 1;
                self.by_signature.insert(signature.clone(), id);
                self.members.insert(id, (signature, BTreeSet::new()));
                id
            }
        };
        self.members
            .get_mut(&id)
            .expect("cluster exists")
            .1
            .insert((seq, job));
        self.of_job.insert(job, id);
        fresh
    }

    /// True when `job` (submitted as `seq`) is the first waiting job of its cluster.
    fn leads(&self, job: JobId, seq: u64) -> bool {
        self.of(job)
            .and_then(|id| self.first(id))
            .is_some_and(|first| first == (seq, job))
    }

    fn leave(&mut self, job: JobId, seq: u64) {
        let Some(id) = self.of_job.remove(&job) else {
            return;
        };
        let Some((signature, jobs)) = self.members.get_mut(&id) else {
            return;
        };
        jobs.remove(&(seq, job));
        if jobs.is_empty() {
            self.by_signature.remove(signature.as_str());
            self.members.remove(&id);
        }
    }

    /// The first waiting job of every cluster, by submit order.
    fn heads(&self) -> BTreeMap<u64, (JobId, u64)> {
        self.members
            .iter()
            .filter_map(|(&id, (_, jobs))| jobs.first().map(|&(seq, job)| (seq, (job, id))))
            .collect()
    }

    fn first(&self, id: u64) -> Option<(u64, JobId)> {
        self.members.get(&id)?.1.first().copied()
    }

    /// The cluster of a waiting job.
    pub(super) fn of(&self, job: JobId) -> Option<u64> {
        self.of_job.get(&job).copied()
    }
}

/// What makes two waiting jobs interchangeable for starting (see the module
/// documentation).
fn signature(job: JobId, owner: &str, classes: &[ClassLimits]) -> String {
    if classes
        .iter()
        .any(|c| c.expression.to_ascii_lowercase().contains("jobid"))
    {
        return format!("\u{1}{}", job.0);
    }
    let mut sorted: Vec<&ClassLimits> = classes.iter().collect();
    sorted.sort_by(|a, b| a.name.cmp(&b.name));
    // Fields are joined by a byte no name or expression holds unescaped.
    let mut s = format!("{owner}\0");
    for c in sorted {
        s.push_str(&format!("{}\0{}\0{}\0", c.name, c.expression, c.min));
    }
    s
}

impl Allocator {
    /// Puts a job that was just submitted at the end of the queue. Only a
    /// job unlike every waiting one needs a settling pass: the queue was
    /// settled after the last input, so the first job of its cluster could
    /// not start, and neither can it, behind it.
    pub(super) fn enqueue(&mut self, job: JobId, owner: &str, classes: &[ClassLimits]) {
        let j = self.jobs.get_mut(&job).expect("enqueuing a live job");
        j.phase = Phase::Waiting;
        self.queue.insert(j.seq, job);
        if self
            .clusters
            .join(job, j.seq, signature(job, owner, classes))
        {
            self.dirty = true;
        }
    }

    /// Takes a job off the queue (it started, was recovered running, or ended).
    pub(super) fn dequeue(&mut self, job: JobId, seq: u64) {
        if self.queue.remove(&seq).is_some() {
            self.clusters.leave(job, seq);
        }
    }

    /// Takes a waiting job that ended off the queue. Slots it kept for its
    /// minimums may now serve a job behind it, so the queue is settled
    /// again, unless an identical job waits ahead of it and keeps the same
    /// slots (then it was never tried, and removing it changes nothing).
    pub(super) fn drop_waiting(&mut self, job: JobId, seq: u64) {
        if self.clusters.leads(job, seq) {
            self.dirty = true;
        }
        self.dequeue(job, seq);
    }

    /// Tries the waiting jobs in submit order, skipping those that wait
    /// behind an identical one that could not start; jobs behind the head
    /// may only take the idle slots no job ahead could use for a minimum.
    pub(super) fn start_waiting(&mut self) {
        // Idle slots no job still waiting ahead could use for a minimum:
        // `None` while every earlier job has started.
        let mut free: Option<Vec<super::HostId>> = None;
        let online = self
            .slots
            .iter()
            .filter(|s| s.state != super::SlotState::Offline)
            .count() as u64;
        let mut heads = self.clusters.heads();
        while let Some((seq, (job, cluster))) = heads.pop_first() {
            if free.as_ref().is_some_and(|f| f.is_empty()) {
                break;
            }
            self.tries += 1;
            if self.try_start(job, free.as_deref()) {
                self.dequeue(job, seq);
                if let Some((next, j)) = self.clusters.first(cluster) {
                    heads.insert(next, (j, cluster));
                }
                if let Some(f) = &mut free {
                    f.retain(|&h| matches!(self.get_slot(h).state, super::SlotState::Idle));
                }
                continue;
            }
            // A job whose minimums add up to more slots than are online
            // cannot start now whatever is kept for it: it waits (the pool
            // may grow) without holding back the jobs behind it, or one
            // `machine_count` would stop the whole queue.
            if self.minimum(job) > online {
                continue;
            }
            let mut f = free
                .take()
                .unwrap_or_else(|| self.idle.iter().map(|&(_, h)| h).collect());
            f.retain(|&h| !self.needs_for_minimum(job, h));
            free = Some(f);
        }
    }

    /// How many times settling the queue tried to start a job, since the
    /// allocator was made: what a test reads to see that a pass visits one
    /// job per cluster, not every waiting job.
    pub fn start_attempts(&self) -> u64 {
        self.tries
    }

    /// How many clusters of identical waiting jobs the queue holds.
    pub fn waiting_clusters(&self) -> usize {
        self.clusters.len()
    }
}
