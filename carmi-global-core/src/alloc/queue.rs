//! The waiting queue grouped by what jobs ask for, so that settling it costs
//! time in the number of *different* requests waiting, not in the number of
//! jobs (HTCondor's negotiator groups jobs into "autoclusters" for the same
//! reason).
//!
//! # Pass order: users by priority, then submit order
//! A settling pass takes the waiting users by fair-share priority (best
//! first, as HTCondor's negotiator does; ties by their oldest waiting
//! job), and each user's jobs in submit order (issue 15, item 7): a user
//! who submitted ten jobs ahead of another user's one does not keep that
//! one waiting for all ten. The order of users is fixed when a full pass
//! begins (`user_rank`) and holds until the next one, so that what is said
//! below of "submit order" holds of this order.
//!
//! # Why skipping is exact
//! A settling pass goes through the waiting jobs in pass order, each with
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

use carmi_proto::ids::{HostId, JobId};

use super::job::Job;
use super::{Allocator, Phase, SlotState};

/// A cluster's signature, user (the fair share's: see `share`), and waiting
/// jobs (submit order, job).
type Members = (String, String, BTreeSet<(u64, JobId)>);

/// The waiting jobs, in submit order and by cluster.
#[derive(Debug, Default)]
pub(super) struct Waiting {
    /// Submitted jobs waiting for their minimums, by submit order.
    pub(super) queue: BTreeMap<u64, JobId>,
    /// Start attempts so far (see [`Allocator::start_attempts`]).
    pub(super) tries: u64,
    /// Signature -> cluster id.
    by_signature: HashMap<String, u64>,
    /// Cluster id -> its signature, its owner and its waiting jobs by submit order.
    members: HashMap<u64, Members>,
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
    /// Waiting jobs per owner.
    waiting_users: HashMap<String, usize>,
    /// Each waiting or running owner's place in the order of the last full
    /// pass (see the module documentation).
    user_rank: HashMap<String, usize>,
}

impl Waiting {
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
    fn join(&mut self, job: JobId, seq: u64, signature: String, owner: &str) -> bool {
        self.queue.insert(seq, job);
        let fresh = !self.by_signature.contains_key(&signature);
        let id = match self.by_signature.get(&signature) {
            Some(&id) => id,
            None => {
                let id = self.next;
                self.next += 1;
                self.by_signature.insert(signature.clone(), id);
                self.members
                    .insert(id, (signature, owner.to_string(), BTreeSet::new()));
                id
            }
        };
        self.members
            .get_mut(&id)
            .expect("cluster exists")
            .2
            .insert((seq, job));
        self.of_job.insert(job, id);
        *self.waiting_users.entry(owner.to_string()).or_default() += 1;
        fresh
    }

    /// True when jobs submitted alone wait to be tried.
    pub(super) fn has_fresh(&self) -> bool {
        !self.fresh.is_empty()
    }

    /// Takes a job off the queue, if it waits.
    fn leave(&mut self, job: JobId, seq: u64) {
        if self.queue.remove(&seq).is_none() {
            return;
        }
        self.reserving.remove(&job);
        let Some(id) = self.of_job.remove(&job) else {
            return;
        };
        let Some((signature, owner, jobs)) = self.members.get_mut(&id) else {
            return;
        };
        jobs.remove(&(seq, job));
        if let Some(n) = self.waiting_users.get_mut(owner.as_str()) {
            *n -= 1;
            if *n == 0 {
                self.waiting_users.remove(owner.as_str());
            }
        }
        if jobs.is_empty() {
            self.by_signature.remove(signature.as_str());
            self.members.remove(&id);
        }
    }

    /// The first waiting job of every cluster, in pass order.
    pub(super) fn heads(&self) -> BTreeMap<(usize, u64), (JobId, u64)> {
        self.members
            .iter()
            .filter_map(|(&id, (_, owner, jobs))| {
                let rank = self.rank(owner);
                jobs.first().map(|&(seq, job)| ((rank, seq), (job, id)))
            })
            .collect()
    }

    /// The first waiting job of a cluster, keyed by its place in the pass.
    fn first(&self, id: u64) -> Option<((usize, u64), JobId)> {
        let (_, owner, jobs) = self.members.get(&id)?;
        let &(seq, job) = jobs.first()?;
        Some(((self.rank(owner), seq), job))
    }

    /// The first waiting job of a cluster.
    pub(super) fn first_job(&self, id: u64) -> Option<JobId> {
        self.members.get(&id)?.2.first().map(|&(_, job)| job)
    }

    /// `owner`'s place in the pass order (unranked: after everyone).
    fn rank(&self, owner: &str) -> usize {
        self.user_rank.get(owner).copied().unwrap_or(usize::MAX)
    }

    /// True when a new job of `owner` comes after every waiting job in
    /// pass order, as a job tried alone must: its owner is ranked, and no
    /// other waiting owner comes after it.
    fn comes_last(&self, owner: &str) -> bool {
        let Some(&mine) = self.user_rank.get(owner) else {
            return false;
        };
        self.waiting_users
            .keys()
            .all(|u| u == owner || self.user_rank.get(u).is_some_and(|&r| r < mine))
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
/// documentation): the owner (membership reads it), the user the fair share
/// charges (the pass order does), the classes with their minimums, and the
/// concurrency limits (a job that waits for a limit keeps another, without
/// it, from nothing).
fn signature(id: JobId, j: &Job) -> String {
    if j.classes
        .values()
        .any(|c| c.expression.to_ascii_lowercase().contains("jobid"))
    {
        return format!("\u{1}{}", id.0);
    }
    // Fields are joined by a byte no name or expression holds unescaped;
    // classes come sorted by name.
    let mut s = format!("{}\0{}\0", j.owner, j.user);
    for (name, c) in &j.classes {
        let min = j.limits.get(name).map_or(0, |&(min, _)| min);
        s.push_str(&format!("{name}\0{}\0{min}\0", c.expression));
    }
    match &j.concurrency {
        Ok(needs) => {
            for (name, amount) in needs {
                s.push_str(&format!("\u{2}{name}:{amount}"));
            }
        }
        Err(_) => return format!("\u{1}{}", id.0),
    }
    s
}

impl Allocator {
    /// Puts a job that was just submitted at the end of the queue. Only a
    /// job unlike every waiting one needs trying: the queue was settled
    /// after the last input, so the first job of its cluster could not
    /// start, and neither can it, behind it.
    pub(super) fn enqueue(&mut self, job: JobId) {
        let j = self.jobs.get_mut(&job).expect("enqueuing a live job");
        j.phase = Phase::Waiting;
        let fresh = self.waiting.join(job, j.seq, signature(job, j), &j.user);
        if fresh {
            if self.waiting.comes_last(&self.jobs[&job].user) {
                self.waiting.fresh.push(job);
            } else {
                // Its owner comes before a waiting one (or was never
                // ranked): only a full pass tries it in its place.
                self.dirty = true;
            }
        }
    }

    /// Takes a job off the queue (it started, was recovered running, or ended).
    pub(super) fn dequeue(&mut self, job: JobId, seq: u64) {
        self.waiting.leave(job, seq);
    }

    /// Takes a waiting job that ended off the queue. Slots it kept for its
    /// minimums may now serve a job behind it, so the queue is settled
    /// again, unless it kept none (an identical job waits ahead of it, or
    /// no free slot could serve it).
    pub(super) fn drop_waiting(&mut self, job: JobId, seq: u64) {
        if self.waiting.reserving.contains(&job) {
            self.dirty = true;
        }
        self.dequeue(job, seq);
    }

    /// Tries `job`, waiting behind jobs that left `free` (see
    /// [`Waiting::tail`]); true when it started. When it did not, `free`
    /// loses the slots it could use, and it is marked reserving if that
    /// took any, or if it is the head.
    fn try_in_turn(&mut self, job: JobId, free: &mut Option<Vec<HostId>>) -> bool {
        self.waiting.tries += 1;
        // A job waiting for a concurrency limit cannot start whatever is
        // kept for it, and keeps nothing back: the limit frees when a job
        // holding it stops, which calls for a full pass.
        if !self.limits_allow(job) {
            return false;
        }
        // A job whose minimums no set of online slots meets cannot start
        // whatever is kept for it: it waits (the pool may grow) without
        // holding back the jobs behind it, or one impossible request would
        // stop the whole queue (see `possible`). Asked first: the verdict is
        // kept per cluster until the pool changes, while a start attempt
        // looks at every idle slot, and its candidates (idle slots and
        // surplus hosts, all online) are a subset of what `possible` looked
        // at, so it would fail as well. Not for a class that reads the
        // clock: its kept verdict may be older than the clock.
        let timed = self.jobs[&job].classes.values().any(|c| c.timed);
        if !timed && !self.possible(job) {
            return false;
        }
        if self.try_start(job, free.as_deref()) {
            if let Some(f) = free {
                f.retain(|&h| matches!(self.pool.get_slot(h).state, SlotState::Idle));
            }
            return true;
        }
        if timed && !self.possible(job) {
            return false;
        }
        let head = free.is_none();
        let mut f = free.take().unwrap_or_else(|| self.pool.idle_hosts());
        let before = f.len();
        f.retain(|&h| !self.needs_for_minimum(job, h));
        if head || f.len() < before {
            self.waiting.reserving.insert(job);
        }
        *free = Some(f);
        false
    }

    /// Tries the jobs submitted alone since the last pass, as that pass
    /// would have tried them last. One that starts calls for a full pass
    /// (hosts it took from running jobs, shares to even out).
    pub(super) fn start_fresh(&mut self) {
        let mut free = self.waiting.tail.take().map(|mut f| {
            f.retain(|&h| matches!(self.pool.get_slot(h).state, SlotState::Idle));
            f
        });
        for job in std::mem::take(&mut self.waiting.fresh) {
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
        self.waiting.tail = free;
    }

    /// Ranks the owners for a full pass: best fair-share priority first
    /// (lower is better), ties by their oldest job. Owners of running jobs
    /// are ranked too, so that a job that starts keeps its place until the
    /// next full pass (within one input priorities do not change, and
    /// neither does the order).
    fn rank_users(&mut self) {
        let mut oldest: HashMap<&str, u64> = HashMap::new();
        let waiting = self
            .waiting
            .members
            .values()
            .filter_map(|(_, owner, jobs)| jobs.first().map(|&(seq, _)| (owner.as_str(), seq)));
        let running = self
            .running
            .iter()
            .map(|id| (self.jobs[id].user.as_str(), self.jobs[id].seq));
        for (owner, seq) in waiting.chain(running) {
            let e = oldest.entry(owner).or_insert(seq);
            *e = (*e).min(seq);
        }
        let mut users: Vec<(f64, u64, &str)> = oldest
            .into_iter()
            .map(|(u, seq)| (self.usage.priority(u), seq, u))
            .collect();
        users.sort_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)));
        let rank = users
            .into_iter()
            .enumerate()
            .map(|(i, (_, _, u))| (u.to_string(), i))
            .collect();
        self.waiting.user_rank = rank;
    }

    /// A job's place in the pass order: its owner's rank, then its submit
    /// order (`queued_ahead` counts by it; tests check the queue is settled
    /// in this order).
    pub(super) fn pass_key(&self, job: JobId) -> (usize, u64) {
        let j = &self.jobs[&job];
        (self.waiting.rank(&j.user), j.seq)
    }

    /// The waiting jobs in the order the queue is settled in (users by
    /// priority as ranked at the last full pass, then submit order): what
    /// a test's oracle walks, as a pass that skipped nothing would.
    pub fn pass_order(&self) -> Vec<JobId> {
        let mut waiting: Vec<((usize, u64), JobId)> = self
            .waiting
            .queue
            .iter()
            .map(|(&seq, &job)| ((self.waiting.rank(&self.jobs[&job].user), seq), job))
            .collect();
        waiting.sort_unstable();
        waiting.into_iter().map(|(_, job)| job).collect()
    }

    /// Tries the waiting jobs in pass order, skipping those that wait
    /// behind an identical one that could not start; jobs behind the head
    /// may only take the idle slots no job ahead could use for a minimum.
    pub(super) fn start_waiting(&mut self) {
        // Every waiting job is seen here, the fresh ones too.
        self.waiting.fresh.clear();
        self.waiting.reserving.clear();
        self.rank_users();
        // Idle slots no job still waiting ahead could use for a minimum:
        // `None` while every earlier job has started.
        let mut free: Option<Vec<HostId>> = None;
        let mut heads = self.waiting.heads();
        while let Some(((_, seq), (job, cluster))) = heads.pop_first() {
            if free.as_ref().is_some_and(|f| f.is_empty()) {
                break;
            }
            if self.try_in_turn(job, &mut free) {
                self.dequeue(job, seq);
                if let Some((next, j)) = self.waiting.first(cluster) {
                    heads.insert(next, (j, cluster));
                }
            }
        }
        self.waiting.tail = free;
    }

    /// How many times settling the queue tried to start a job, since the
    /// allocator was made: what a test reads to see that a pass visits one
    /// job per cluster, not every waiting job.
    pub fn start_attempts(&self) -> u64 {
        self.waiting.tries
    }

    /// How many clusters of identical waiting jobs the queue holds.
    pub fn waiting_clusters(&self) -> usize {
        self.waiting.len()
    }
}
