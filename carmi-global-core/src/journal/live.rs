//! [`Live`]: the live state of the journal, kept as records are appended,
//! from which a compaction writes the shortest journal with the same replay.

use carmi_proto::events::JobEvent;
use carmi_proto::ids::{HostId, JobId, ProcessId, RequestId};

use super::Record;
use crate::bounds::{ENDED_LOGS, EVENTS_PER_JOB, HISTORY_LIMIT};

/// What a replay of the journal so far needs: the result of applying every
/// record, as records again ([`Live::records`]).
#[derive(Debug, Default)]
pub struct Live {
    next_job: u64,
    next_process: u64,
    /// Each machine's last `Machine` record, by name, with its first position.
    machines: std::collections::BTreeMap<String, (u64, Vec<HostId>)>,
    /// Jobs submitted and not ended: their `Submitted` and `Started` records.
    jobs: std::collections::BTreeMap<JobId, (Record, Option<Record>)>,
    /// Classes defined at run time by live jobs: their last `ClassDefined`.
    classes: std::collections::BTreeMap<(JobId, String), Record>,
    /// Processes spawned by live jobs, by id, with their record.
    processes: std::collections::BTreeMap<ProcessId, Record>,
    /// Of those, the ones that exited: their `Exited` record with its
    /// status (so that a restart still lists them, issue 15 item 4).
    exited: std::collections::BTreeMap<ProcessId, Record>,
    /// Of those, and of the masters, the ones reported started: their
    /// `Running` record.
    running: std::collections::BTreeMap<ProcessId, Record>,
    /// The master of each live job's `Started` record, so that its
    /// `Running` record is kept (a restart tells a master that never
    /// arrived, sent again, from one that was lost).
    masters: std::collections::BTreeMap<ProcessId, JobId>,
    /// The last ended jobs' `History` records, oldest first.
    history: std::collections::VecDeque<Record>,
    /// Live jobs' events, the last [`EVENTS_PER_JOB`] of each.
    events: std::collections::BTreeMap<JobId, std::collections::VecDeque<JobEvent>>,
    /// Ended jobs' events, for the last [`ENDED_LOGS`] jobs to end, in the
    /// order they ended.
    ended_events: std::collections::VecDeque<(JobId, std::collections::VecDeque<JobEvent>)>,
    /// The same processes by job, so that a job's end costs time in its
    /// own processes, not in every live one.
    by_job: std::collections::BTreeMap<JobId, std::collections::BTreeSet<ProcessId>>,
    /// Outstanding requests of live processes, by process and request.
    outstanding: std::collections::BTreeMap<(ProcessId, RequestId), Record>,
    /// Exclusions of live jobs' classes, by job and class, in order.
    excluded: std::collections::BTreeMap<(JobId, String), Vec<Record>>,
    /// Records in `excluded` ([`Live::len`] must not walk them).
    excluded_len: usize,
    /// Live jobs' last `Checkpoint`.
    checkpoints: std::collections::BTreeMap<JobId, Record>,
    /// Hosts held by live jobs: their last `Claimed`, by host.
    claims: std::collections::BTreeMap<HostId, Record>,
    /// Live jobs with a `Started` record: [`Live::len`] is asked after every
    /// append and must not walk the jobs.
    started: usize,
    /// Records applied so far (orders machines).
    seq: u64,
    /// The allocation queues' last snapshot.
    pilots: Option<Record>,
    /// The last `Usage` record (fair share between users).
    usage: Option<Record>,
    /// The last `Factors` record (users' priority factors).
    factors: Option<Record>,
}

impl Live {
    /// The state after `records`.
    pub fn of(records: &[Record]) -> Live {
        let mut live = Live::default();
        for r in records {
            live.apply(r);
        }
        live
    }

    /// Takes one more record into account.
    pub fn apply(&mut self, r: &Record) {
        self.seq += 1;
        match r {
            Record::Pilots(_) => self.pilots = Some(r.clone()),
            Record::Submitted { job, .. } => {
                self.next_job = self.next_job.max(job.0 + 1);
                if let Some((_, Some(_))) = self.jobs.insert(*job, (r.clone(), None)) {
                    self.started -= 1;
                }
            }
            Record::Started { job, master, .. } => self.apply_started(r, *job, *master),
            Record::Attached { job, root, .. } => {
                self.next_job = self.next_job.max(job.0 + 1);
                self.next_process = self.next_process.max(root.0 + 1);
                self.jobs.insert(*job, (r.clone(), None));
            }
            Record::ClassDefined { job, name, .. } => {
                if self.jobs.contains_key(job) {
                    self.classes.insert((*job, name.clone()), r.clone());
                }
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
            } => {
                if self.jobs.contains_key(job) {
                    self.outstanding.insert((*process, *request), r.clone());
                }
            }
            Record::Answered { process, request } => {
                self.outstanding.remove(&(*process, *request));
            }
            Record::Claimed { job, host, .. } => {
                if self.jobs.contains_key(job) {
                    self.claims.insert(*host, r.clone());
                }
            }
            Record::Freed { job, host } => {
                if matches!(self.claims.get(host), Some(Record::Claimed { job: j, .. }) if j == job)
                {
                    self.claims.remove(host);
                }
            }
            Record::Excluded { job, class, .. } => {
                if self.jobs.contains_key(job) {
                    self.excluded
                        .entry((*job, class.clone()))
                        .or_default()
                        .push(r.clone());
                    self.excluded_len += 1;
                }
            }
            Record::Ended { job } => {
                if let Some((_, Some(started))) = self.jobs.remove(job) {
                    self.started -= 1;
                    self.drop_master(Some(&started));
                }
                for p in self.by_job.remove(job).unwrap_or_default() {
                    self.processes.remove(&p);
                    self.exited.remove(&p);
                    self.running.remove(&p);
                }
                self.classes.retain(|(j, _), _| j != job);
                self.checkpoints.remove(job);
                self.forget_requests(*job);
                if let Some(events) = self.events.remove(job) {
                    self.end_events(*job, events);
                }
            }
            Record::Machine { name, hosts } => {
                let seq = self.seq;
                let e = self
                    .machines
                    .entry(name.clone())
                    .or_insert((seq, Vec::new()));
                e.1 = hosts.clone();
            }
            Record::Spawned { .. } | Record::Running { .. } | Record::Exited { .. } => {
                self.apply_process(r)
            }
            Record::Counters {
                next_job,
                next_process,
            } => {
                self.next_job = self.next_job.max(*next_job);
                self.next_process = self.next_process.max(*next_process);
            }
            Record::Held { job, .. } => {
                // Held replaces `Started`: its master and processes were killed.
                let mut old = None;
                if let Some(j) = self.jobs.get_mut(job) {
                    self.started += j.1.is_none() as usize;
                    old = j.1.replace(r.clone());
                }
                self.drop_master(old.as_ref());
                for p in self.by_job.remove(job).unwrap_or_default() {
                    self.processes.remove(&p);
                    self.exited.remove(&p);
                    self.running.remove(&p);
                }
                self.classes.retain(|(j, _), _| j != job);
                self.forget_requests(*job);
            }
            Record::Checkpoint { job, .. } => {
                if self.jobs.contains_key(job) {
                    self.checkpoints.insert(*job, r.clone());
                }
            }
            Record::Released { job } => {
                if let Some(j) = self.jobs.get_mut(job)
                    && matches!(j.1, Some(Record::Held { .. }))
                {
                    j.1 = None;
                    self.started -= 1;
                }
            }
            Record::Events(events) => {
                for e in events {
                    self.keep_event(e);
                }
            }
            Record::Usage { .. } => self.usage = Some(r.clone()),
            Record::Factors { .. } => self.factors = Some(r.clone()),
            Record::History(h) => {
                self.next_job = self.next_job.max(h.job.0 + 1);
                if self.history.len() == HISTORY_LIMIT {
                    self.history.pop_front();
                }
                self.history.push_back(r.clone());
            }
        }
    }

    /// Keeps an event: with its live job's, else with its ended job's
    /// (the `ended` event comes after the job's `Ended`).
    fn keep_event(&mut self, e: &JobEvent) {
        let list = if self.jobs.contains_key(&e.job) {
            self.events.entry(e.job).or_default()
        } else {
            if !self.ended_events.iter().rev().any(|(j, _)| *j == e.job) {
                self.end_events(e.job, Default::default());
            }
            match self
                .ended_events
                .iter_mut()
                .rev()
                .find(|(j, _)| *j == e.job)
            {
                Some((_, list)) => list,
                None => return,
            }
        };
        if list.len() == EVENTS_PER_JOB {
            list.pop_front();
        }
        list.push_back(e.clone());
    }

    /// Moves an ended job's events among the ended ones, forgetting the
    /// oldest job's beyond [`ENDED_LOGS`].
    fn end_events(&mut self, job: JobId, events: std::collections::VecDeque<JobEvent>) {
        if self.ended_events.len() == ENDED_LOGS {
            self.ended_events.pop_front();
        }
        self.ended_events.push_back((job, events));
    }

    /// Forgets a job's outstanding requests, exclusions and hosts (it ended, or
    /// was held: its processes were killed and its classes start afresh).
    fn forget_requests(&mut self, job: JobId) {
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

    /// A process's records: spawned, reported started, exited.
    fn apply_process(&mut self, r: &Record) {
        match r {
            Record::Spawned { process, job, .. } => {
                self.next_process = self.next_process.max(process.0 + 1);
                self.exited.remove(process);
                self.running.remove(process);
                if let Some(old) = self.processes.insert(*process, r.clone()) {
                    self.forget_process(*process, &old);
                }
                self.by_job.entry(*job).or_default().insert(*process);
            }
            Record::Running { process }
                if self.processes.contains_key(process) && !self.exited.contains_key(process)
                    || self.masters.contains_key(process) =>
            {
                self.running.insert(*process, r.clone());
            }
            Record::Exited {
                process, status, ..
            } => {
                self.running.remove(process);
                if status.is_some() && self.processes.contains_key(process) {
                    // Kept, with how it ended, while its job lives.
                    self.exited.insert(*process, r.clone());
                } else if let Some(old) = self.processes.remove(process) {
                    self.exited.remove(process);
                    self.forget_process(*process, &old);
                }
                let gone: Vec<_> = self
                    .outstanding
                    .range((*process, RequestId(0))..)
                    .take_while(|((p, _), _)| p == process)
                    .map(|(k, _)| *k)
                    .collect();
                for k in gone {
                    self.outstanding.remove(&k);
                }
            }
            _ => {}
        }
    }

    /// A job's `Started` record: it replaces the job's last one, and its
    /// master's `Running` record is kept from now on.
    fn apply_started(&mut self, r: &Record, job: JobId, master: ProcessId) {
        self.next_process = self.next_process.max(master.0 + 1);
        let Some(j) = self.jobs.get_mut(&job) else {
            return;
        };
        self.started += j.1.is_none() as usize;
        let old = j.1.replace(r.clone());
        // The same master placed again keeps its `Running`.
        if !matches!(&old, Some(Record::Started { master: m, .. }) if *m == master) {
            self.drop_master(old.as_ref());
        }
        self.masters.insert(master, job);
    }

    /// Forgets the master of a job's `Started` record `started` (replaced
    /// or ended) and its `Running` record.
    fn drop_master(&mut self, started: Option<&Record>) {
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

    /// How many records [`Live::records`] returns.
    pub fn len(&self) -> usize {
        1 + usize::from(self.pilots.is_some())
            + self.machines.len()
            + self.history.len()
            + self.jobs.len()
            + self.started
            + self.classes.len()
            + self.processes.len()
            + self.exited.len()
            + self.running.len()
            + self.events.len()
            + self.ended_events.len()
            + self.outstanding.len()
            + self.excluded_len
            + self.claims.len()
            + self.checkpoints.len()
            + self.usage.is_some() as usize
            + self.factors.is_some() as usize
    }

    /// Always false: the counters are always there.
    pub fn is_empty(&self) -> bool {
        false
    }

    /// The shortest journal whose replay gives the same state: counters,
    /// machines (in the order they first appeared), the history, then each
    /// live job's records, then their run-time classes, then the live
    /// processes (a job's `Submitted` or `Attached` always comes before its
    /// classes and processes).
    pub fn records(&self) -> Vec<Record> {
        let mut out = Vec::with_capacity(self.len());
        out.push(Record::Counters {
            next_job: self.next_job,
            next_process: self.next_process,
        });
        let mut machines: Vec<_> = self.machines.iter().collect();
        machines.sort_by_key(|(_, (seq, _))| *seq);
        out.extend(
            machines
                .into_iter()
                .map(|(name, (_, hosts))| Record::Machine {
                    name: name.clone(),
                    hosts: hosts.clone(),
                }),
        );
        out.extend(self.history.iter().cloned());
        out.extend(self.usage.clone());
        out.extend(self.factors.clone());
        // Ended jobs' events replay into ended logs wherever they stand.
        out.extend(
            self.ended_events
                .iter()
                .map(|(_, events)| Record::Events(events.iter().cloned().collect())),
        );
        for (submitted, started) in self.jobs.values() {
            out.push(submitted.clone());
            out.extend(started.clone());
        }
        out.extend(self.checkpoints.values().cloned());
        out.extend(self.classes.values().cloned());
        // After their classes.
        out.extend(self.excluded.values().flatten().cloned());
        // After the jobs' own records: a replay opens their logs first.
        out.extend(
            self.events
                .values()
                .map(|events| Record::Events(events.iter().cloned().collect())),
        );
        out.extend(self.claims.values().cloned());
        out.extend(self.processes.values().cloned());
        out.extend(self.running.values().cloned());
        out.extend(self.exited.values().cloned());
        out.extend(self.outstanding.values().cloned());
        out.extend(self.pilots.clone());
        out
    }
}
