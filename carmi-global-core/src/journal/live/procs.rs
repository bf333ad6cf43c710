//! The records of live jobs' processes, and of their masters' starts.

use std::collections::{BTreeMap, BTreeSet};

use carmi_proto::ids::{JobId, ProcessId};

use crate::journal::Record;

/// Live jobs' processes: spawned, reported started, exited.
#[derive(Debug, Default)]
pub(super) struct Procs {
    /// Processes spawned by live jobs, by id, with their record.
    pub spawned: BTreeMap<ProcessId, Record>,
    /// Of those, the ones that exited: their `Exited` record with its
    /// status (so that a restart still lists them, issue 15 item 4).
    pub exited: BTreeMap<ProcessId, Record>,
    /// Of those, and of the masters, the ones reported started: their
    /// `Running` record.
    pub running: BTreeMap<ProcessId, Record>,
    /// The master of each live job's `Started` record, so that its
    /// `Running` record is kept (a restart tells a master that never
    /// arrived, sent again, from one that was lost).
    masters: BTreeMap<ProcessId, JobId>,
    /// The same processes by job, so that a job's end costs time in its
    /// own processes, not in every live one.
    by_job: BTreeMap<JobId, BTreeSet<ProcessId>>,
}

impl Procs {
    /// A process's records: spawned, reported started, exited; returns the
    /// process that exited, if `r` says one did.
    pub fn apply(&mut self, r: &Record) -> Option<ProcessId> {
        match r {
            Record::Spawned { process, job, .. } => {
                self.exited.remove(process);
                self.running.remove(process);
                if let Some(old) = self.spawned.insert(*process, r.clone()) {
                    self.forget_process(*process, &old);
                }
                self.by_job.entry(*job).or_default().insert(*process);
            }
            Record::Running { process }
                if self.spawned.contains_key(process) && !self.exited.contains_key(process)
                    || self.masters.contains_key(process) =>
            {
                self.running.insert(*process, r.clone());
            }
            Record::Exited {
                process, status, ..
            } => {
                self.running.remove(process);
                if status.is_some() && self.spawned.contains_key(process) {
                    // Kept, with how it ended, while its job lives.
                    self.exited.insert(*process, r.clone());
                } else if let Some(old) = self.spawned.remove(process) {
                    self.exited.remove(process);
                    self.forget_process(*process, &old);
                }
                return Some(*process);
            }
            _ => {}
        }
        None
    }

    /// Forgets every process of `job` (it ended, or was held: they were killed).
    pub fn forget_job(&mut self, job: JobId) {
        for p in self.by_job.remove(&job).unwrap_or_default() {
            self.spawned.remove(&p);
            self.exited.remove(&p);
            self.running.remove(&p);
        }
    }

    /// `master` leads `job` from now on: its `Running` record is kept.
    pub fn add_master(&mut self, master: ProcessId, job: JobId) {
        self.masters.insert(master, job);
    }

    /// Forgets the master of a job's `Started` record `started` (replaced
    /// or ended) and its `Running` record.
    pub fn drop_master(&mut self, started: Option<&Record>) {
        if let Some(Record::Started { master, .. }) = started {
            self.masters.remove(master);
            self.running.remove(master);
        }
    }

    /// Drops `process` (whose record was `old`) from its job's set.
    fn forget_process(&mut self, process: ProcessId, old: &Record) {
        if let Record::Spawned { job, .. } = old
            && let Some(set) = self.by_job.get_mut(job)
        {
            set.remove(&process);
            if set.is_empty() {
                self.by_job.remove(job);
            }
        }
    }

    /// How many records these are.
    pub fn len(&self) -> usize {
        self.spawned.len() + self.exited.len() + self.running.len()
    }
}
