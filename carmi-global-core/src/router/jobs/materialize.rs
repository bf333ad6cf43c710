//! Late materialization of a cluster's procs (`max_materialize`,
//! `max_idle`), as HTCondor's: a cluster of 2,395 procs with
//! `max_materialize = 50` is 50 jobs in the queue (and in the allocator's
//! passes) at a time; the others wait here, outside the allocator, and
//! become jobs as earlier ones end (or start running, for `max_idle`).
//! Their ids are given at submit (`C+P`), so `$(ClusterId)` and `C.P` never
//! depend on when a proc materializes.
//!
//! Journal: the procs still waiting are one `Pending` record, written at
//! submit; each proc that materializes is a `Submitted` record of its own
//! with its cluster, which a replay (and a compaction) takes off the front
//! of the waiting ones; `PendingDropped` forgets them (`carmi rm C`).

use std::collections::{BTreeSet, VecDeque};

use carmi_proto::ids::JobId;
use carmi_proto::msg::SubmitRequest;
use carmi_proto::submit::JobSpec;
use tracing::warn;

use crate::alloc::Phase;
use crate::journal::Record;
use crate::router::{Output, Router};

/// A cluster's procs not materialized yet.
#[derive(Debug)]
pub(in crate::router) struct Pending {
    /// What every proc shares (its `spec` is replaced by each proc's).
    pub template: SubmitRequest,
    /// The waiting procs' specs, the next one first.
    pub procs: VecDeque<JobSpec>,
    /// The proc number of `procs[0]`.
    pub next: u32,
    /// At most this many procs of the cluster in the queue.
    pub max_materialize: u32,
    /// At most this many of them waiting for machines.
    pub max_idle: u32,
    /// The cluster's procs in the queue.
    pub live: BTreeSet<JobId>,
}

impl Pending {
    /// The `Pending` record of what still waits.
    pub fn record(&self, cluster: JobId) -> Option<Record> {
        let mut procs = self.procs.iter().cloned();
        let spec = procs.next()?;
        Some(Record::Pending {
            cluster,
            first: self.next,
            request: Box::new(SubmitRequest {
                spec,
                procs: procs.collect(),
                max_materialize: Some(self.max_materialize),
                max_idle: Some(self.max_idle),
                ..self.template.clone()
            }),
        })
    }

    /// What a `Pending` record describes.
    pub fn from_record(first: u32, mut request: SubmitRequest) -> Pending {
        let mut procs: VecDeque<JobSpec> = std::mem::take(&mut request.procs).into();
        let max_materialize = request.max_materialize.take().unwrap_or(u32::MAX).max(1);
        let max_idle = request.max_idle.take().unwrap_or(u32::MAX).max(1);
        procs.push_front(request.spec.clone());
        Pending {
            template: request,
            procs,
            next: first,
            max_materialize,
            max_idle,
            live: BTreeSet::new(),
        }
    }

    /// Takes the procs up to `job` (materialized, replayed) off the front.
    pub fn taken_up_to(&mut self, cluster: JobId, job: JobId) {
        while !self.procs.is_empty() && cluster.0.saturating_add(u64::from(self.next)) <= job.0 {
            self.procs.pop_front();
            self.next = self.next.saturating_add(1);
        }
    }
}

impl Router {
    /// How many of `procs` (a new cluster's, none in the queue yet) go in
    /// the queue at submit: all, unless `max_materialize`/`max_idle` say fewer.
    pub(in crate::router) fn materialized_at_submit(
        procs: usize,
        max_materialize: Option<u32>,
        max_idle: Option<u32>,
    ) -> usize {
        let bound = max_materialize
            .unwrap_or(u32::MAX)
            .min(max_idle.unwrap_or(u32::MAX));
        procs.min(bound.max(1) as usize)
    }

    /// Materializes what each cluster's bounds allow now.
    pub(in crate::router) fn materialize_all(&mut self) {
        let clusters: Vec<JobId> = self.jobs.pending.keys().copied().collect();
        for c in clusters {
            self.materialize(c);
        }
    }

    /// Materializes procs of `cluster` while its bounds allow.
    pub(in crate::router) fn materialize(&mut self, cluster: JobId) {
        while let Some(p) = self.jobs.pending.get(&cluster) {
            let idle = p
                .live
                .iter()
                .filter(|j| self.alloc.job_phase(**j) == Some(Phase::Waiting))
                .count();
            if p.live.len() >= p.max_materialize as usize || idle >= p.max_idle as usize {
                return;
            }
            let p = self.jobs.pending.get_mut(&cluster).expect("checked");
            let Some(spec) = p.procs.pop_front() else {
                self.jobs.pending.remove(&cluster);
                return;
            };
            let job = JobId(cluster.0.saturating_add(u64::from(p.next)));
            p.next = p.next.saturating_add(1);
            let request = SubmitRequest {
                spec,
                ..p.template.clone()
            };
            if p.procs.is_empty() {
                self.jobs.pending.remove(&cluster);
            }
            match self.materialize_one(job, cluster, request) {
                Ok(()) => {
                    if let Some(p) = self.jobs.pending.get_mut(&cluster) {
                        p.live.insert(job);
                    }
                }
                Err(why) => warn!(job = %job, "proc {} not materialized: {why}", job.0 - cluster.0),
            }
        }
    }

    /// A proc of `cluster` left the queue: another may take its place.
    pub(in crate::router) fn proc_left(&mut self, job: JobId, cluster: JobId) {
        if let Some(p) = self.jobs.pending.get_mut(&cluster) {
            p.live.remove(&job);
            self.materialize(cluster);
        }
    }

    /// Forgets `cluster`'s waiting procs (`carmi rm C`); whether it had any.
    pub(in crate::router) fn drop_pending(&mut self, cluster: JobId) -> bool {
        if self.jobs.pending.remove(&cluster).is_none() {
            return false;
        }
        self.out
            .push(Output::Journal(Record::PendingDropped { cluster }));
        true
    }
}
