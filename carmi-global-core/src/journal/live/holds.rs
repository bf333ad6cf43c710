//! What live jobs hold beyond their own records: run-time classes,
//! outstanding requests, exclusions, claimed hosts and checkpoints.

use std::collections::BTreeMap;

use carmi_proto::ids::{HostId, JobId, ProcessId, RequestId};

use crate::journal::Record;

/// What live jobs hold (see the module documentation).
#[derive(Debug, Default)]
pub(super) struct Holds {
    /// Classes defined at run time by live jobs: their last `ClassDefined`.
    pub classes: BTreeMap<(JobId, String), Record>,
    /// Outstanding requests of live processes, by process and request.
    pub outstanding: BTreeMap<(ProcessId, RequestId), Record>,
    /// Exclusions of live jobs' classes, by job and class, in order.
    pub excluded: BTreeMap<(JobId, String), Vec<Record>>,
    /// Records in `excluded` ([`Holds::len`] must not walk them).
    excluded_len: usize,
    /// Live jobs' last `Checkpoint`.
    pub checkpoints: BTreeMap<JobId, Record>,
    /// Hosts held by live jobs: their last `Claimed`, by host.
    pub claims: BTreeMap<HostId, Record>,
}

impl Holds {
    /// Takes `r` into account if it is one of these records (any other is
    /// left alone); `live` says whether a job has not ended.
    pub fn apply(&mut self, r: &Record, live: impl Fn(&JobId) -> bool) {
        match r {
            Record::ClassDefined { job, name, .. } if live(job) => {
                self.classes.insert((*job, name.clone()), r.clone());
            }
            Record::ClassRemoved { job, name } => {
                self.classes.remove(&(*job, name.clone()));
                if let Some(gone) = self.excluded.remove(&(*job, name.clone())) {
                    self.excluded_len -= gone.len();
                }
            }
            Record::Outstanding {
                job,
                process,
                request,
                ..
            } if live(job) => {
                self.outstanding.insert((*process, *request), r.clone());
            }
            Record::Answered { process, request } => {
                self.outstanding.remove(&(*process, *request));
            }
            Record::Claimed { job, host, .. } if live(job) => {
                self.claims.insert(*host, r.clone());
            }
            Record::Freed { job, host } => {
                if matches!(self.claims.get(host), Some(Record::Claimed { job: j, .. }) if j == job)
                {
                    self.claims.remove(host);
                }
            }
            Record::Excluded { job, class, .. } if live(job) => {
                self.excluded
                    .entry((*job, class.clone()))
                    .or_default()
                    .push(r.clone());
                self.excluded_len += 1;
            }
            Record::Checkpoint { job, .. } if live(job) => {
                self.checkpoints.insert(*job, r.clone());
            }
            _ => {}
        }
    }

    /// Forgets a job's classes, outstanding requests, exclusions and hosts
    /// (it ended, or was held: its processes were killed and its classes
    /// start afresh).
    pub fn forget_job(&mut self, job: JobId) {
        self.classes.retain(|(j, _), _| *j != job);
        self.claims
            .retain(|_, r| !matches!(r, Record::Claimed { job: j, .. } if *j == job));
        self.outstanding
            .retain(|_, r| !matches!(r, Record::Outstanding { job: j, .. } if *j == job));
        let mut gone = 0;
        self.excluded.retain(|(j, _), list| {
            let keep = *j != job;
            if !keep {
                gone += list.len();
            }
            keep
        });
        self.excluded_len -= gone;
    }

    /// Forgets the outstanding requests of `process`, which exited.
    pub fn forget_process(&mut self, process: ProcessId) {
        let gone: Vec<_> = self
            .outstanding
            .range((process, RequestId(0))..)
            .take_while(|((p, _), _)| *p == process)
            .map(|(k, _)| *k)
            .collect();
        for k in gone {
            self.outstanding.remove(&k);
        }
    }

    /// How many records these are.
    pub fn len(&self) -> usize {
        self.classes.len()
            + self.outstanding.len()
            + self.excluded_len
            + self.claims.len()
            + self.checkpoints.len()
    }
}
