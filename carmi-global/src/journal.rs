//! The journal: every accepted job and every change of its state, appended
//! to `journal.log` in the state directory, so that a restarted global RM
//! recovers its queue and its running jobs (their masters keep running at
//! their local RMs, which reconnect and re-report them).
//!
//! # Format
//! One record per line: 16 hex digits of the FNV-1a 64 hash of the JSON text,
//! a space, the JSON text of a [`Record`], `\n`. A record is written and
//! fsync'd before the router's next output goes out, so a job is on disk
//! before its submit is acknowledged.
//!
//! # Damage
//! A line that is cut short, whose hash does not match, or whose JSON does not
//! decode ends the journal: everything before it is kept and replayed, the
//! damage is reported ([`Damage`]), the damaged bytes are saved beside the
//! journal as `journal.damaged-<offset>` and cut off, so new records follow
//! the last good one. [`parse`] is pure, for tests.
//!
//! # Compaction
//! Ended jobs and exited processes stay in the file until it is compacted:
//! the journal keeps the live state ([`Live`]) as it appends, and once the
//! records written since the last compaction outnumber the live ones by far
//! (see [`Journal::append`]), or when it is opened, it rewrites the file with
//! only what a replay needs: a [`Record::Counters`] so that ids never go
//! back, each machine's host ids, the last ended jobs' [`Record::History`]
//! (bounded like the router's history), and the live jobs and processes. The new
//! file is written aside, fsync'd and renamed over the old one, so a crash
//! leaves either the old journal or the new one, never a mix.

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};

use carmi_api::events::JobEvent;
use carmi_api::ids::{HostId, JobId, ProcessId};
use carmi_api::msg::{JobRecord, SubmitRequest};
use serde::{Deserialize, Serialize};

use crate::alloc::ReqRef;
use crate::router::{ENDED_LOGS, EVENTS_PER_JOB};

/// One state change.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum Record {
    /// A job was accepted (macros not expanded: replay expands them again).
    Submitted {
        /// Its id.
        job: JobId,
        /// What was submitted.
        request: Box<SubmitRequest>,
    },
    /// Its minimums were met and its master was sent to the submit machine.
    Started {
        /// The job.
        job: JobId,
        /// The master process.
        master: ProcessId,
        /// Where the global RM placed it, away from the submit machine (an
        /// empty name while no machine matches); absent when it runs on
        /// the submit machine. Written again once it is placed.
        #[serde(default)]
        placed: Option<String>,
    },
    /// The job ended (master exited, `carmi rm`, or it could not start).
    Ended {
        /// The job.
        job: JobId,
    },
    /// A machine was given host ids (first registration, or more slots):
    /// replayed in order, so every name gets its ids back after a restart.
    Machine {
        /// The machine.
        name: String,
        /// Every host id it was ever given, in slot order.
        hosts: Vec<HostId>,
    },
    /// A process of a job was sent to a host (`ClassSpawn`).
    Spawned {
        /// The process.
        process: ProcessId,
        /// Its job.
        job: JobId,
        /// Where.
        host: HostId,
        /// The class the host is held for.
        class: String,
        /// The request that started it, to tell of its exit.
        origin: Option<ReqRef>,
    },
    /// A spawned process ended.
    Exited {
        /// The process.
        process: ProcessId,
    },
    /// A job left the queue: how, for `carmi history` (written before its
    /// `Ended`, and by compactions for the last
    /// [`HISTORY_LIMIT`](crate::router::HISTORY_LIMIT) ended jobs).
    History(Box<JobRecord>),
    /// A job was created by a process started by hand (not submitted)
    /// attaching at a machine's local RM: after a restart it keeps its id,
    /// its root process and its workers.
    Attached {
        /// The job.
        job: JobId,
        /// The machine the root process attached at (also the job's owner).
        machine: String,
        /// The root process: the job ends when it leaves.
        root: ProcessId,
    },
    /// A job defined or redefined a class at run time (`DefineClass`); replayed
    /// so that its recovered processes find their class again. One that failed
    /// fails again on replay, changing nothing.
    ClassDefined {
        /// The job.
        job: JobId,
        /// The class.
        name: String,
        /// Its requirements.
        expression: String,
        /// Its rank, if any.
        rank: Option<String>,
    },
    /// A job removed a class (`RemoveClass`).
    ClassRemoved {
        /// The job.
        job: JobId,
        /// The class.
        name: String,
    },
    /// A submitted job was held (`carmi hold`): it stays in the queue
    /// without a master, processes or hosts until a `Released`.
    Held {
        /// The job.
        job: JobId,
        /// Why, for `carmi q`.
        reason: String,
    },
    /// A held job was released: it waits again at its old place.
    Released {
        /// The job.
        job: JobId,
    },
    /// Events of submitted jobs' logs (`carmi events`), those of one input
    /// of the router, written after its other records.
    Events(Vec<JobEvent>),
    /// Written first by a compaction: ids below these were handed out
    /// before, by records the compaction dropped, and must not be reused.
    Counters {
        /// The next job id.
        next_job: u64,
        /// The next process id.
        next_process: u64,
    },
}

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
    /// Processes spawned and not exited, by id, with their record.
    processes: std::collections::BTreeMap<ProcessId, Record>,
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
    /// Live jobs with a `Started` record: [`Live::len`] is asked after every
    /// append and must not walk the jobs.
    started: usize,
    /// Records applied so far (orders machines).
    seq: u64,
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
            Record::Submitted { job, .. } => {
                self.next_job = self.next_job.max(job.0 + 1);
                if let Some((_, Some(_))) = self.jobs.insert(*job, (r.clone(), None)) {
                    self.started -= 1;
                }
            }
            Record::Started { job, master, .. } => {
                self.next_process = self.next_process.max(master.0 + 1);
                if let Some(j) = self.jobs.get_mut(job) {
                    self.started += j.1.is_none() as usize;
                    j.1 = Some(r.clone());
                }
            }
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
            }
            Record::Ended { job } => {
                if let Some((_, Some(_))) = self.jobs.remove(job) {
                    self.started -= 1;
                }
                for p in self.by_job.remove(job).unwrap_or_default() {
                    self.processes.remove(&p);
                }
                self.classes.retain(|(j, _), _| j != job);
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
            Record::Spawned { process, job, .. } => {
                self.next_process = self.next_process.max(process.0 + 1);
                if let Some(old) = self.processes.insert(*process, r.clone()) {
                    self.forget_process(*process, &old);
                }
                self.by_job.entry(*job).or_default().insert(*process);
            }
            Record::Exited { process } => {
                if let Some(old) = self.processes.remove(process) {
                    self.forget_process(*process, &old);
                }
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
                if let Some(j) = self.jobs.get_mut(job) {
                    self.started += j.1.is_none() as usize;
                    j.1 = Some(r.clone());
                }
                for p in self.by_job.remove(job).unwrap_or_default() {
                    self.processes.remove(&p);
                }
                self.classes.retain(|(j, _), _| j != job);
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
            Record::History(h) => {
                self.next_job = self.next_job.max(h.job.0 + 1);
                if self.history.len() == crate::router::HISTORY_LIMIT {
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
        1 + self.machines.len()
            + self.history.len()
            + self.jobs.len()
            + self.started
            + self.classes.len()
            + self.processes.len()
            + self.events.len()
            + self.ended_events.len()
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
        out.extend(self.classes.values().cloned());
        // After the jobs' own records: a replay opens their logs first.
        out.extend(
            self.events
                .values()
                .map(|events| Record::Events(events.iter().cloned().collect())),
        );
        out.extend(self.processes.values().cloned());
        out
    }
}

/// Where and why the journal stops being readable.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Damage {
    /// Byte offset of the first damaged line (everything before is kept).
    pub offset: usize,
    /// Its 1-based line number.
    pub line: usize,
    /// What is wrong with it.
    pub reason: String,
    /// Bytes from there to the end.
    pub bytes: usize,
}

fn fnv1a(bytes: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for &b in bytes {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    h
}

/// The line for a record, with its newline.
pub fn encode(record: &Record) -> String {
    let json = serde_json::to_string(record).expect("journal records always serialize");
    format!("{:016x} {json}\n", fnv1a(json.as_bytes()))
}

/// Reads a journal's bytes: the records up to the first damaged line, and the damage if any.
pub fn parse(bytes: &[u8]) -> (Vec<Record>, Option<Damage>) {
    let mut records = Vec::new();
    let mut offset = 0;
    let mut line = 0;
    while offset < bytes.len() {
        line += 1;
        let damage = |reason: String| Damage {
            offset,
            line,
            reason,
            bytes: bytes.len() - offset,
        };
        let Some(len) = bytes[offset..].iter().position(|&b| b == b'\n') else {
            return (records, Some(damage("cut short: no end of line".into())));
        };
        let text = &bytes[offset..offset + len];
        let ok = (|| {
            let (hash, json) = text
                .split_at_checked(16)
                .filter(|(_, rest)| rest.first() == Some(&b' '))
                .ok_or("no hash before the record")?;
            let json = &json[1..];
            let hash = std::str::from_utf8(hash)
                .ok()
                .and_then(|h| u64::from_str_radix(h, 16).ok())
                .ok_or("the hash is not 16 hex digits")?;
            if hash != fnv1a(json) {
                return Err("the hash does not match the record".to_string());
            }
            serde_json::from_slice::<Record>(json).map_err(|e| format!("undecodable record: {e}"))
        })();
        match ok {
            Ok(r) => records.push(r),
            Err(reason) => return (records, Some(damage(reason.to_string()))),
        }
        offset += len + 1;
    }
    (records, None)
}

/// The open journal, appending.
pub struct Journal {
    path: PathBuf,
    file: File,
    live: Live,
    /// Records in the file now.
    in_file: usize,
}

/// A journal is compacted when it holds more than this many records and
/// more than [`COMPACT_RATIO`] times what its live state needs.
const COMPACT_MIN: usize = 4096;
/// See [`COMPACT_MIN`].
const COMPACT_RATIO: usize = 4;

impl Journal {
    /// Opens (creating) `dir/journal.log`, returning what it holds and any
    /// damage, which is saved aside and cut off.
    pub fn open(dir: &Path) -> std::io::Result<(Journal, Vec<Record>, Option<Damage>)> {
        std::fs::create_dir_all(dir)?;
        let path = dir.join("journal.log");
        let bytes = match std::fs::read(&path) {
            Ok(b) => b,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Vec::new(),
            Err(e) => return Err(e),
        };
        let (records, damage) = parse(&bytes);
        if let Some(d) = &damage {
            std::fs::write(
                dir.join(format!("journal.damaged-{}", d.offset)),
                &bytes[d.offset..],
            )?;
            let f = OpenOptions::new().write(true).open(&path)?;
            f.set_len(d.offset as u64)?;
            f.sync_all()?;
        }
        let file = OpenOptions::new().create(true).append(true).open(&path)?;
        let live = Live::of(&records);
        let mut journal = Journal {
            path,
            file,
            live,
            in_file: records.len(),
        };
        // Start the run from a short journal: what the last run left over
        // (ended jobs, exited processes) is never needed again.
        if journal.in_file > journal.live.len() {
            journal.compact()?;
        }
        Ok((journal, records, damage))
    }

    /// Appends records and waits until they are on disk; compacts the file
    /// when it has grown far beyond its live state.
    pub fn append(&mut self, records: &[Record]) -> std::io::Result<()> {
        let text: String = records.iter().map(encode).collect();
        self.file.write_all(text.as_bytes())?;
        self.file.sync_data()?;
        for r in records {
            self.live.apply(r);
        }
        self.in_file += records.len();
        if self.in_file > COMPACT_MIN && self.in_file > COMPACT_RATIO * self.live.len() {
            // The records are on disk already: a failed compaction costs
            // only space, so it is logged and the old file kept.
            if let Err(e) = self.compact() {
                tracing::warn!(journal = %self.path.display(), "cannot compact the journal: {e}");
            }
        }
        Ok(())
    }

    /// Rewrites the file with only the live state's records, atomically.
    pub fn compact(&mut self) -> std::io::Result<()> {
        let records = self.live.records();
        let text: String = records.iter().map(encode).collect();
        let tmp = self.path.with_extension("compact");
        {
            let mut f = File::create(&tmp)?;
            f.write_all(text.as_bytes())?;
            f.sync_all()?;
        }
        std::fs::rename(&tmp, &self.path)?;
        if let Some(dir) = self.path.parent() {
            File::open(dir)?.sync_all()?;
        }
        self.file = OpenOptions::new().append(true).open(&self.path)?;
        tracing::info!(
            journal = %self.path.display(),
            from = self.in_file,
            to = records.len(),
            "journal compacted"
        );
        self.in_file = records.len();
        Ok(())
    }

    /// Records in the file now (for tests and logs).
    pub fn records_in_file(&self) -> usize {
        self.in_file
    }

    /// Where it is.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use carmi_api::msg::ExecutableRef;

    fn submitted(job: u64) -> Record {
        let spec =
            carmi_api::submit::parse("j", "executable = m\nmachine_count = 1..3\nqueue\n").unwrap();
        Record::Submitted {
            job: JobId(job),
            request: Box::new(SubmitRequest {
                owner: "alice".into(),
                machine: "m0".into(),
                executable: ExecutableRef {
                    name: "m".into(),
                    sha256: "ab".repeat(32),
                    size: 3,
                },
                spec,
                submitted_unix: 1,
                anywhere: false,
            }),
        }
    }

    fn sample() -> (Vec<Record>, Vec<u8>) {
        let records = vec![
            submitted(1),
            Record::Started {
                placed: None,
                job: JobId(1),
                master: ProcessId(4),
            },
            submitted(2),
            Record::Ended { job: JobId(1) },
        ];
        let bytes = records.iter().map(encode).collect::<String>().into_bytes();
        (records, bytes)
    }

    #[test]
    fn whole_journal_reads_back() {
        let (records, bytes) = sample();
        assert_eq!(parse(&bytes), (records, None));
        assert_eq!(parse(b""), (Vec::new(), None));
    }

    #[test]
    fn a_truncated_tail_keeps_everything_before_it() {
        let (records, bytes) = sample();
        let last_start = bytes.len() - encode(&records[3]).len();
        for cut in [last_start + 1, last_start + 17, bytes.len() - 1] {
            let (got, damage) = parse(&bytes[..cut]);
            assert_eq!(got, records[..3], "cut at {cut}");
            let d = damage.expect("damage reported");
            assert_eq!((d.offset, d.line), (last_start, 4));
            assert!(d.reason.contains("cut short"), "{}", d.reason);
            assert_eq!(d.bytes, cut - last_start);
        }
    }

    #[test]
    fn a_corrupted_record_stops_the_replay_there() {
        let (records, mut bytes) = sample();
        let second = encode(&records[0]).len();
        // Flip one byte inside the second record's JSON.
        bytes[second + 30] ^= 0x01;
        let (got, damage) = parse(&bytes);
        assert_eq!(got, records[..1]);
        let d = damage.unwrap();
        assert_eq!(d.line, 2);
        assert!(d.reason.contains("hash does not match"), "{}", d.reason);
        let (got, damage) = parse(b"not a record\n");
        assert!(got.is_empty());
        assert!(damage.unwrap().reason.contains("no hash"));
    }

    #[test]
    fn open_saves_and_cuts_the_damage_then_appends_after_the_good_part() {
        let dir = tempfile::tempdir().unwrap();
        let (records, bytes) = sample();
        let path = dir.path().join("journal.log");
        std::fs::write(&path, &bytes[..bytes.len() - 5]).unwrap();
        let (mut j, got, damage) = Journal::open(dir.path()).unwrap();
        assert_eq!(got, records[..3]);
        let d = damage.unwrap();
        assert!(
            dir.path()
                .join(format!("journal.damaged-{}", d.offset))
                .exists()
        );
        j.append(&[Record::Ended { job: JobId(2) }]).unwrap();
        drop(j);
        let (_, got, damage) = Journal::open(dir.path()).unwrap();
        assert_eq!(damage, None);
        assert_eq!(got.len(), 4);
        assert_eq!(got[3], Record::Ended { job: JobId(2) });
    }

    #[test]
    fn the_live_state_keeps_only_what_a_replay_needs() {
        let records = vec![
            Record::Machine {
                name: "m0".into(),
                hosts: vec![HostId(1)],
            },
            submitted(1),
            Record::Started {
                placed: None,
                job: JobId(1),
                master: ProcessId(4),
            },
            submitted(2),
            Record::Spawned {
                process: ProcessId(5),
                job: JobId(1),
                host: HostId(1),
                class: "c".into(),
                origin: None,
            },
            Record::Spawned {
                process: ProcessId(6),
                job: JobId(2),
                host: HostId(1),
                class: "c".into(),
                origin: None,
            },
            Record::Machine {
                name: "m0".into(),
                hosts: vec![HostId(1), HostId(2)],
            },
            Record::Ended { job: JobId(1) },
            Record::Exited {
                process: ProcessId(6),
            },
        ];
        // The count kept as records are applied agrees with the records, at every step.
        for n in 0..=records.len() {
            let live = Live::of(&records[..n]);
            assert_eq!(live.len(), live.records().len(), "after {n} records");
        }
        let live = Live::of(&records).records();
        assert_eq!(
            live,
            vec![
                Record::Counters {
                    next_job: 3,
                    next_process: 7
                },
                Record::Machine {
                    name: "m0".into(),
                    hosts: vec![HostId(1), HostId(2)],
                },
                submitted(2),
            ]
        );
        // Compacting a compacted journal changes nothing.
        assert_eq!(Live::of(&live).records(), live);
        assert_eq!(Live::of(&live).len(), live.len());
    }

    #[test]
    fn a_long_journal_is_compacted_and_reads_back_the_same() {
        let dir = tempfile::tempdir().unwrap();
        let (mut j, _, _) = Journal::open(dir.path()).unwrap();
        let mut all = Vec::new();
        // Many short jobs, one still waiting at the end; 100 per append
        // (each append is an fsync).
        for first in (1..=3000u64).step_by(100) {
            let mut batch = Vec::new();
            for job in first..first + 100 {
                batch.push(submitted(job));
                if job < 3000 {
                    batch.push(Record::Ended { job: JobId(job) });
                }
            }
            j.append(&batch).unwrap();
            all.extend(batch);
        }
        assert!(
            j.records_in_file() <= COMPACT_MIN,
            "compacted on the way: {} of {} records in the file",
            j.records_in_file(),
            all.len()
        );
        drop(j);
        let (j, got, damage) = Journal::open(dir.path()).unwrap();
        assert_eq!(damage, None);
        assert_eq!(Live::of(&got).records(), Live::of(&all).records());
        assert_eq!(j.records_in_file(), 2, "counters and the waiting job");
        assert!(!dir.path().join("journal.compact").exists());
    }
}
