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
//! # Between passes
//! A pass also leaves behind the idle slots that no waiting job could use
//! (`tail`) and which jobs kept slots from the jobs behind them
//! (`reserving`). A job unlike every waiting one is then tried alone, with
//! those slots, as the pass would have tried it last; and a removed job
//! that kept nothing from anyone changes nothing for the jobs behind it. So
//! neither a submit nor a removal walks the queue, even when every waiting
//! job asks for something different. Only what may start waiting jobs
//! (a slot becoming idle, an ad changing, a job starting or a master
//! running, a job that kept slots leaving) runs a full pass.
//!
//! Membership evaluates class expressions and machine `Requirements`
//! against the job's ad, `Owner` and `JobId`. The owner is part of the
//! signature; a job whose class expressions mention `JobId` is a cluster of
//! its own. (A machine whose `Requirements` tells jobs apart by `JobId` is
//! not seen: a job behind an identical one that such a machine refused
//! waits until that one starts or leaves.)

use std::collections::{BTreeMap, BTreeSet, HashMap};

use carmi_proto::ids::JobId;

use super::{Allocator, HostId, Phase, SlotState};
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
    /// What the last pass (and the jobs tried alone since) left for a job
    /// behind all of them: `None` when every one of them started (a new job
    /// is the head), else the idle slots none of them could use.
    tail: Option<Vec<HostId>>,
    /// Jobs unlike every waiting one, submitted since, to be tried alone.
    fresh: Vec<JobId>,
    /// Waiting jobs that failed to start and kept slots from the jobs behind
    /// them (the head, or a job some free slot served): removing one of
    /// them calls for a pass.
    reserving: std::collections::HashSet<JobId>,
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

    /// True when jobs submitted alone wait to be tried.
    pub(super) fn has_fresh(&self) -> bool {
        !self.fresh.is_empty()
    }

    fn leave(&mut self, job: JobId, seq: u64) {
        self.reserving.remove(&job);
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

    /// Waiting jobs that kept slots from the jobs behind them in the last pass.
    pub(super) fn reserving_jobs(&self) -> Vec<JobId> {
        self.reserving.iter().copied().collect()
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
    /// job unlike every waiting one needs trying: the queue was settled
    /// after the last input, so the first job of its cluster could not
    /// start, and neither can it, behind it.
    pub(super) fn enqueue(&mut self, job: JobId, owner: &str, classes: &[ClassLimits]) {
        let j = self.jobs.get_mut(&job).expect("enqueuing a live job");
        j.phase = Phase::Waiting;
        self.queue.insert(j.seq, job);
        if self
            .clusters
            .join(job, j.seq, signature(job, owner, classes))
        {
            self.clusters.fresh.push(job);
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
    /// again, unless it kept none (an identical job waits ahead of it, or
    /// no free slot could serve it).
    pub(super) fn drop_waiting(&mut self, job: JobId, seq: u64) {
        if self.clusters.reserving.contains(&job) {
            self.dirty = true;
        }
        self.dequeue(job, seq);
    }

    /// Tries `job`, waiting behind jobs that left `free` (see
    /// [`Clusters::tail`]); true when it started. When it did not, `free`
    /// loses the slots it could use, and it is marked reserving if that
    /// took any, or if it is the head.
    fn try_in_turn(&mut self, job: JobId, free: &mut Option<Vec<HostId>>) -> bool {
        self.tries += 1;
        if self.try_start(job, free.as_deref()) {
            if let Some(f) = free {
                f.retain(|&h| matches!(self.get_slot(h).state, SlotState::Idle));
            }
            return true;
        }
        // A job whose minimums no set of online slots meets cannot start
        // whatever is kept for it: it waits (the pool may grow) without
        // holding back the jobs behind it, or one impossible request would
        // stop the whole queue (see `possible`).
        if !self.possible(job) {
            return false;
        }
        let head = free.is_none();
        let mut f = free
            .take()
            .unwrap_or_else(|| self.idle.iter().map(|&(_, h)| h).collect());
        let before = f.len();
        f.retain(|&h| !self.needs_for_minimum(job, h));
        if head || f.len() < before {
            self.clusters.reserving.insert(job);
        }
        *free = Some(f);
        false
    }

    /// Tries the jobs submitted alone since the last pass, as that pass
    /// would have tried them last. One that starts calls for a full pass
    /// (hosts it took from running jobs, shares to even out).
    pub(super) fn start_fresh(&mut self) {
        let mut free = self.clusters.tail.take().map(|mut f| {
            f.retain(|&h| matches!(self.get_slot(h).state, SlotState::Idle));
            f
        });
        for job in std::mem::take(&mut self.clusters.fresh) {
            let Some(seq) = self
                .jobs
                .get(&job)
                .filter(|j| j.phase == Phase::Waiting)
                .map(|j| j.seq)
            else {
                continue;
            };
            if free.as_ref().is_some_and(|f| f.is_empty()) {
                continue;
            }
            if self.try_in_turn(job, &mut free) {
                self.dequeue(job, seq);
                self.dirty = true;
            }
        }
        self.clusters.tail = free;
    }

    /// Tries the waiting jobs in submit order, skipping those that wait
    /// behind an identical one that could not start; jobs behind the head
    /// may only take the idle slots no job ahead could use for a minimum.
    pub(super) fn start_waiting(&mut self) {
        // Every waiting job is seen here, the fresh ones too.
        self.clusters.fresh.clear();
        self.clusters.reserving.clear();
        // Idle slots no job still waiting ahead could use for a minimum:
        // `None` while every earlier job has started.
        let mut free: Option<Vec<HostId>> = None;
        let mut heads = self.clusters.heads();
        while let Some((seq, (job, cluster))) = heads.pop_first() {
            if free.as_ref().is_some_and(|f| f.is_empty()) {
                break;
            }
            if self.try_in_turn(job, &mut free) {
                self.dequeue(job, seq);
                if let Some((next, j)) = self.clusters.first(cluster) {
                    heads.insert(next, (j, cluster));
                }
            }
        }
        self.clusters.tail = free;
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
