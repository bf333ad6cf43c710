//! Pending `AddHosts` requests, first come, first served: by arrival
//! sequence number, by request, and grouped by (job, class), since class
//! membership is a property of the group: offering a slot costs one check
//! per group, however long the queue.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use carmi_proto::ids::{HostId, JobId};

use super::ReqRef;

/// One pending `AddHosts`.
pub(super) struct Pending {
    pub(super) req: ReqRef,
    pub(super) job: JobId,
    pub(super) class: String,
    /// Hosts not yet announced, including `partial`.
    pub(super) remaining: u32,
    pub(super) increment: u32,
    /// Claimed, not yet announced (fewer than one group).
    pub(super) partial: Vec<HostId>,
}

impl Pending {
    /// Hosts still to be found (neither announced nor partial).
    pub(super) fn unclaimed(&self) -> u32 {
        self.remaining.saturating_sub(self.partial.len() as u32)
    }
}

/// The pending requests and their indexes.
#[derive(Default)]
pub(super) struct PendingQueue {
    /// By arrival sequence number: first come, first served.
    pub(super) by_seq: BTreeMap<u64, Pending>,
    /// The same, by request.
    pub(super) by_req: HashMap<ReqRef, u64>,
    /// The same, grouped by (job, class).
    pub(super) groups: BTreeMap<(JobId, String), BTreeSet<u64>>,
    pub(super) next_seq: u64,
    /// Requests taken off the queue so far (see [`super::Allocator::requests_ended`]).
    pub(super) removed: u64,
}

impl PendingQueue {
    /// Queues a request; returns its sequence number.
    pub(super) fn push(&mut self, p: Pending) -> u64 {
        let seq = self.next_seq;
        self.next_seq += 1;
        self.by_req.insert(p.req, seq);
        self.groups
            .entry((p.job, p.class.clone()))
            .or_default()
            .insert(seq);
        self.by_seq.insert(seq, p);
        seq
    }

    /// Takes a request off the queue (its partial hosts are the caller's).
    pub(super) fn remove(&mut self, seq: u64) -> Pending {
        let p = self
            .by_seq
            .remove(&seq)
            .expect("allocator invariant: removing a queued request");
        self.by_req.remove(&p.req);
        self.removed += 1;
        let key = (p.job, p.class.clone());
        if let Some(set) = self.groups.get_mut(&key) {
            set.remove(&seq);
            if set.is_empty() {
                self.groups.remove(&key);
            }
        }
        p
    }

    /// The groups of `job`, one per class with a pending request.
    fn groups_of(&self, job: JobId) -> impl Iterator<Item = &BTreeSet<u64>> {
        self.groups
            .range((job, String::new())..)
            .take_while(move |((j, _), _)| *j == job)
            .map(|(_, seqs)| seqs)
    }

    /// The pending requests of `job`, by class.
    pub(super) fn of_job(&self, job: JobId) -> Vec<u64> {
        self.groups_of(job).flatten().copied().collect()
    }

    /// How many requests `job` has pending.
    pub(super) fn count_of_job(&self, job: JobId) -> usize {
        self.groups_of(job).map(|g| g.len()).sum()
    }

    /// The pending requests of `job`'s `class`, oldest first.
    pub(super) fn of_class(&self, job: JobId, class: &str) -> Vec<u64> {
        self.groups
            .get(&(job, class.to_string()))
            .map(|seqs| seqs.iter().copied().collect())
            .unwrap_or_default()
    }
}
