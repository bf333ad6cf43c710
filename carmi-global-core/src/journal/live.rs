//! [`Live`]: the live state of the journal, kept as records are appended,
//! from which a compaction writes the shortest journal with the same replay.
//! Its parts: the processes of live jobs (`procs.rs`), what live jobs hold
//! besides (`holds.rs`: classes, requests, exclusions, claims,
//! checkpoints), and jobs' events (`events.rs`).

use std::collections::{BTreeMap, VecDeque};

use carmi_proto::ids::{HostId, JobId, ProcessId};

use super::Record;
use crate::bounds::HISTORY_LIMIT;

mod events;
mod holds;
mod procs;

/// The records that only their last one counts, whoever wrote it.
#[derive(Debug, Default)]
struct Latest {
    /// The allocation queues' last snapshot.
    pilots: Option<Record>,
    /// The last `Usage` record (fair share between users).
    usage: Option<Record>,
    /// The last `Factors` record (users' priority factors).
    factors: Option<Record>,
}

/// What a replay of the journal so far needs: the result of applying every
/// record, as records again ([`Live::records`]).
#[derive(Debug, Default)]
pub struct Live {
    next_job: u64,
    next_process: u64,
    /// Records applied so far (orders machines).
    seq: u64,
    /// Each machine's last `Machine` record, by name, with its first position.
    machines: BTreeMap<String, (u64, Vec<HostId>)>,
    /// Jobs submitted and not ended: their `Submitted` and `Started` records.
    jobs: BTreeMap<JobId, (Record, Option<Record>)>,
    /// Live jobs with a `Started` record: [`Live::len`] is asked after every
    /// append and must not walk the jobs.
    started: usize,
    /// The last ended jobs' `History` records, oldest first.
    history: VecDeque<Record>,
    /// Live jobs' processes and their masters.
    procs: procs::Procs,
    /// What live jobs hold besides their own records.
    holds: holds::Holds,
    /// Jobs' events.
    events: events::KeptEvents,
    latest: Latest,
    /// Clusters' procs not materialized yet: each cluster's `Pending`
    /// record and how many of its procs materialized since.
    pending: BTreeMap<JobId, (Record, usize)>,
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
            Record::Submitted { .. }
            | Record::Started { .. }
            | Record::Attached { .. }
            | Record::Ended { .. }
            | Record::Held { .. }
            | Record::Released { .. } => self.apply_job(r),
            Record::ClassDefined { .. }
            | Record::ClassRemoved { .. }
            | Record::Outstanding { .. }
            | Record::Answered { .. }
            | Record::Claimed { .. }
            | Record::Freed { .. }
            | Record::Excluded { .. }
            | Record::Checkpoint { .. } => {
                let jobs = &self.jobs;
                self.holds.apply(r, |job| jobs.contains_key(job));
            }
            Record::Spawned { process, .. } => {
                self.next_process = self.next_process.max(process.0 + 1);
                self.procs.apply(r);
            }
            Record::Running { .. } => {
                self.procs.apply(r);
            }
            Record::Exited { .. } => {
                if let Some(process) = self.procs.apply(r) {
                    self.holds.forget_process(process);
                }
            }
            Record::Pending {
                cluster,
                first,
                request,
            } => {
                let end = super::pending_end(*cluster, *first, request.procs.len());
                self.next_job = self.next_job.max(end);
                self.pending.insert(*cluster, (r.clone(), 0));
            }
            Record::PendingDropped { cluster } => {
                self.pending.remove(cluster);
            }
            Record::Pilots(_) => self.latest.pilots = Some(r.clone()),
            Record::Usage { .. } => self.latest.usage = Some(r.clone()),
            Record::Factors { .. } => self.latest.factors = Some(r.clone()),
            Record::Machine { .. }
            | Record::Counters { .. }
            | Record::Events(_)
            | Record::History(_) => self.apply_pool(r),
        }
    }

    /// A job's own records: submitted or attached, started, held, released, ended.
    fn apply_job(&mut self, r: &Record) {
        match r {
            Record::Submitted { job, cluster, .. } => {
                self.next_job = self.next_job.max(job.0 + 1);
                if let Some(c) = cluster {
                    self.materialized(*c, *job);
                }
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
            Record::Ended { job } => {
                if let Some((_, Some(started))) = self.jobs.remove(job) {
                    self.started -= 1;
                    self.procs.drop_master(Some(&started));
                }
                self.procs.forget_job(*job);
                self.holds.forget_job(*job);
                self.holds.checkpoints.remove(job);
                self.events.job_ended(*job);
            }
            Record::Held { job, .. } => {
                // Held replaces `Started`: its master and processes were killed.
                let mut old = None;
                if let Some(j) = self.jobs.get_mut(job) {
                    self.started += j.1.is_none() as usize;
                    old = j.1.replace(r.clone());
                }
                self.procs.drop_master(old.as_ref());
                self.procs.forget_job(*job);
                self.holds.forget_job(*job);
            }
            Record::Released { job } => {
                if let Some(j) = self.jobs.get_mut(job)
                    && matches!(j.1, Some(Record::Held { .. }))
                {
                    j.1 = None;
                    self.started -= 1;
                }
            }
            _ => {}
        }
    }

    /// The pool's records: machines, counters, events, history.
    fn apply_pool(&mut self, r: &Record) {
        match r {
            Record::Machine { name, hosts } => {
                let seq = self.seq;
                let e = self
                    .machines
                    .entry(name.clone())
                    .or_insert((seq, Vec::new()));
                e.1 = hosts.clone();
            }
            Record::Counters {
                next_job,
                next_process,
            } => {
                self.next_job = self.next_job.max(*next_job);
                self.next_process = self.next_process.max(*next_process);
            }
            Record::Events(events) => {
                for e in events {
                    self.events.keep(e, self.jobs.contains_key(&e.job));
                }
            }
            Record::History(h) => {
                self.next_job = self.next_job.max(h.job.0 + 1);
                if self.history.len() == HISTORY_LIMIT {
                    self.history.pop_front();
                }
                self.history.push_back(r.clone());
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
            self.procs.drop_master(old.as_ref());
        }
        self.procs.add_master(master, job);
    }

    /// How many records [`Live::records`] returns.
    pub fn len(&self) -> usize {
        let latest = &self.latest;
        1 + usize::from(latest.pilots.is_some())
            + self.machines.len()
            + self.history.len()
            + self.jobs.len()
            + self.started
            + self.procs.len()
            + self.holds.len()
            + self.events.len()
            + latest.usage.is_some() as usize
            + latest.factors.is_some() as usize
            + self.pending.len()
    }

    /// Proc `job` of `cluster` materialized: it and the procs before it are
    /// no longer waiting.
    fn materialized(&mut self, cluster: JobId, job: JobId) {
        let Some((Record::Pending { first, request, .. }, taken)) = self.pending.get_mut(&cluster)
        else {
            return;
        };
        let start = cluster.0.saturating_add(u64::from(*first));
        if job.0 >= start {
            *taken = (*taken).max((job.0 - start + 1) as usize);
        }
        if *taken > request.procs.len() {
            self.pending.remove(&cluster);
        }
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
        out.extend(self.latest.usage.clone());
        out.extend(self.latest.factors.clone());
        // Ended jobs' events replay into ended logs wherever they stand.
        out.extend(
            self.events
                .ended
                .iter()
                .map(|(_, events)| Record::Events(events.iter().cloned().collect())),
        );
        for (submitted, started) in self.jobs.values() {
            out.push(submitted.clone());
            out.extend(started.clone());
        }
        // After the procs that materialized: a replay takes them off the front.
        out.extend(
            self.pending
                .values()
                .filter_map(|(r, taken)| trimmed(r, *taken)),
        );
        out.extend(self.holds.checkpoints.values().cloned());
        out.extend(self.holds.classes.values().cloned());
        // After their classes.
        out.extend(self.holds.excluded.values().flatten().cloned());
        // After the jobs' own records: a replay opens their logs first.
        out.extend(
            self.events
                .live
                .values()
                .map(|events| Record::Events(events.iter().cloned().collect())),
        );
        out.extend(self.holds.claims.values().cloned());
        out.extend(self.procs.spawned.values().cloned());
        out.extend(self.procs.running.values().cloned());
        out.extend(self.procs.exited.values().cloned());
        out.extend(self.holds.outstanding.values().cloned());
        out.extend(self.latest.pilots.clone());
        out
    }
}

/// `Pending` record `r` without its first `taken` procs (`None` when none is left).
fn trimmed(r: &Record, taken: usize) -> Option<Record> {
    let Record::Pending {
        cluster,
        first,
        request,
    } = r
    else {
        return None;
    };
    if taken == 0 {
        return Some(r.clone());
    }
    let spec = request.procs.get(taken - 1)?.clone();
    let procs = request.procs.get(taken..).unwrap_or_default().to_vec();
    Some(Record::Pending {
        cluster: *cluster,
        first: first + taken as u32,
        request: Box::new(carmi_proto::msg::SubmitRequest {
            spec,
            procs,
            ..(**request).clone()
        }),
    })
}
