//! The journal's records and their pure encoding: every accepted job and
//! every change of its state, appended to `journal.log` in the state
//! directory (by the driver, `carmi_global::journal`), so that a restarted global RM
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
//! (see `Journal::append` in the driver, `carmi-global`, which does the file I/O), or when it is opened, it rewrites the file with
//! only what a replay needs: a [`Record::Counters`] so that ids never go
//! back, each machine's host ids, the last ended jobs' [`Record::History`]
//! (bounded like the router's history), and the live jobs and processes. The new
//! file is written aside, fsync'd and renamed over the old one, so a crash
//! leaves either the old journal or the new one, never a mix.

use carmi_proto::events::JobEvent;
use carmi_proto::ids::{HostId, JobId, ProcessId, RequestId};
use carmi_proto::msg::{ExecutableRef, ExitStatus, JobRecord, Request, SubmitRequest};
use serde::{Deserialize, Serialize};

use crate::alloc::ReqRef;

/// One state change.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum Record {
    /// A job was accepted (macros not expanded: replay expands them again).
    Submitted {
        /// Its id.
        job: JobId,
        /// What was submitted: for a proc of a cluster, its own spec, with
        /// no other procs.
        request: Box<SubmitRequest>,
        /// The cluster it is a proc of (proc `job - cluster`); absent for a
        /// cluster of one proc and in journals before clusters.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        cluster: Option<JobId>,
    },
    /// A cluster's procs not materialized yet (`max_materialize`,
    /// `max_idle`): `request.spec` is proc `first`, `request.procs` the
    /// ones after it. Each later `Submitted` of the cluster takes the procs
    /// up to its own off the front.
    Pending {
        /// The cluster.
        cluster: JobId,
        /// The proc number of `request.spec`.
        first: u32,
        /// What the procs share, their specs and the cluster's bounds.
        request: Box<SubmitRequest>,
    },
    /// A cluster's waiting procs were dropped (`carmi rm C`).
    PendingDropped {
        /// The cluster.
        cluster: JobId,
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
        /// The name of its executable (`Processes`); absent in older journals.
        #[serde(default)]
        executable: Option<String>,
    },
    /// A spawned process was reported started and its spawner told: a
    /// restart does not tell it again, and one never reported (its
    /// `Started` in flight when the global RM died) is told when its
    /// machine lists it running again.
    Running {
        /// The process.
        process: ProcessId,
    },
    /// A spawned process ended.
    Exited {
        /// The process.
        process: ProcessId,
        /// How (absent in older journals, whose exited processes a restart
        /// forgets): with it, `ProcessInfo` and `Processes` still list the
        /// process with its exit status after a restart, while its job lives.
        #[serde(default)]
        status: Option<ExitStatus>,
        /// CPU seconds it used.
        #[serde(default)]
        cpu_seconds: f64,
    },
    /// A job left the queue: how, for `carmi history` (written before its
    /// `Ended`, and by compactions for the last
    /// [`HISTORY_LIMIT`](crate::bounds::HISTORY_LIMIT) ended jobs).
    History(Box<JobRecord>),
    /// Every user's fair-share usage (decayed host-seconds) at `at_unix`,
    /// written about once a minute while it changes; the last one is
    /// replayed, decayed over the time the global RM was down.
    Usage {
        /// Wall-clock time of the values, seconds since the Unix epoch.
        at_unix: u64,
        /// (user, host-seconds).
        users: Vec<(String, f64)>,
    },
    /// Every user's priority factor other than 1, written whenever an
    /// admin sets one (`carmi userprio --set-factor`); the last one holds.
    Factors {
        /// (user, factor).
        users: Vec<(String, f64)>,
    },
    /// A job was created by a process started by hand (not submitted)
    /// attaching at a machine's local RM: after a restart it keeps its id,
    /// its root process and its workers.
    Attached {
        /// The job.
        job: JobId,
        /// The machine the root process attached at (also the job's owner
        /// when `owner` is absent).
        machine: String,
        /// The root process: the job ends when it leaves.
        root: ProcessId,
        /// The identity whose token started the job (absent in a pool
        /// without tokens, and in journals older than this field).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        owner: Option<String>,
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
    /// A job's master left a checkpoint, stored by content with the
    /// executables: its next master starts with these files in its sandbox.
    /// The last one of a live job replaces the ones before.
    Checkpoint {
        /// The job.
        job: JobId,
        /// The files (name in the sandbox, SHA-256, size).
        files: Vec<ExecutableRef>,
    },
    /// A request that stays outstanding after it is accepted (`AddHosts`
    /// waiting for hosts, a notify subscription): should the global RM
    /// restart before it is answered in full or cancelled, its process is
    /// told that it was lost when it attaches again, never left waiting.
    Outstanding {
        /// The job.
        job: JobId,
        /// The process that made it.
        process: ProcessId,
        /// Its id.
        request: RequestId,
        /// What it was, for the failure message (`AddHosts of 3 hosts of class w`).
        what: String,
        /// The request itself, so that a restarted global RM serves it again
        /// when its process attaches (an `AddHosts` with the hosts still to
        /// come). Absent in journals written before it was kept: such a
        /// request fails, naming it.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        body: Option<Box<Request>>,
    },
    /// An outstanding request was answered in full, failed, was cancelled,
    /// or its loss was told.
    Answered {
        /// The process that made it.
        process: ProcessId,
        /// Its id.
        request: RequestId,
    },
    /// A job kept machines out of a class (`ExcludeHosts`): replayed after
    /// its class, so that a restart does not give them back to it.
    Excluded {
        /// The job.
        job: JobId,
        /// The class.
        class: String,
        /// The hosts it named (their machines are excluded).
        hosts: Vec<HostId>,
    },
    /// A host was given to a job for a class (at its start, by growth, for
    /// an `AddHosts`): replayed so that a job keeps the hosts it held after a
    /// restart, processes on them or not. (A reader older than this record
    /// stops at it as damage.)
    Claimed {
        /// The job.
        job: JobId,
        /// The host.
        host: HostId,
        /// The class it is held for.
        class: String,
    },
    /// A host left a job (given back, lost, withdrawn, preempted); a job's
    /// end or hold frees all of its hosts without one.
    Freed {
        /// The job.
        job: JobId,
        /// The host.
        host: HostId,
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
    /// The allocation queues as they are now (`carmi alloc`); the last one
    /// replaces every earlier one.
    Pilots(Box<crate::alloc_queue::Snapshot>),
}

/// The job id after the last proc of a `Pending` record (`first` and the
/// `later` procs after it, of `cluster`): the next id a replay may give.
pub fn pending_end(cluster: JobId, first: u32, later: usize) -> u64 {
    cluster
        .0
        .saturating_add(u64::from(first))
        .saturating_add(later as u64)
        .saturating_add(1)
}

mod live;
pub use live::Live;

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

/// Sample records for tests of this crate and of the journal file in the driver.
#[cfg(any(test, feature = "testing"))]
pub mod test_records {
    use super::*;
    use carmi_proto::msg::ExecutableRef;

    /// A one-class job submitted by alice from `m0`.
    pub fn submitted(job: u64) -> Record {
        let spec = carmi_proto::submit::parse("j", "executable = m\nmachine_count = 1..3\nqueue\n")
            .unwrap();
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
                procs: Vec::new(),
                max_materialize: None,
                max_idle: None,
            }),
            cluster: None,
        }
    }

    /// Four records (two jobs, one started and ended) and their encoding.
    pub fn sample() -> (Vec<Record>, Vec<u8>) {
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
}

#[cfg(test)]
mod tests {
    use super::*;
    use test_records::{sample, submitted};

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
                executable: None,
            },
            Record::Spawned {
                process: ProcessId(6),
                job: JobId(2),
                host: HostId(1),
                class: "c".into(),
                origin: None,
                executable: None,
            },
            Record::Machine {
                name: "m0".into(),
                hosts: vec![HostId(1), HostId(2)],
            },
            Record::Ended { job: JobId(1) },
            // As an older journal wrote it, without its status: forgotten.
            Record::Exited {
                process: ProcessId(6),
                status: None,
                cpu_seconds: 0.0,
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
        // With its status (issue 15 item 4) the exited process of a live
        // job is kept, so that a restart still lists it.
        let mut with_status = records.clone();
        let exited = Record::Exited {
            process: ProcessId(6),
            status: Some(ExitStatus::Code(0)),
            cpu_seconds: 0.5,
        };
        *with_status.last_mut().expect("records") = exited.clone();
        let kept = Live::of(&with_status);
        assert_eq!(kept.len(), kept.records().len());
        let kept = kept.records();
        assert_eq!(&kept[..live.len()], &live[..]);
        assert!(matches!(
            &kept[live.len()..],
            [Record::Spawned { process: ProcessId(6), .. }, e] if *e == exited
        ));
    }

    #[test]
    fn outstanding_requests_and_exclusions_live_as_long_as_their_process_and_class() {
        let pending = |process: u64, request: u64| Record::Outstanding {
            job: JobId(1),
            process: ProcessId(process),
            request: RequestId(request),
            what: "AddHosts of 2 host(s) of class `c`".into(),
            body: None,
        };
        let excluded = |class: &str| Record::Excluded {
            job: JobId(1),
            class: class.into(),
            hosts: vec![HostId(1)],
        };
        let records = vec![
            submitted(1),
            Record::Started {
                placed: None,
                job: JobId(1),
                master: ProcessId(4),
            },
            pending(4, 1),
            pending(4, 2),
            pending(5, 1),
            excluded("c"),
            excluded("d"),
            Record::Answered {
                process: ProcessId(4),
                request: RequestId(1),
            },
            Record::Exited {
                process: ProcessId(5),
                status: None,
                cpu_seconds: 0.0,
            },
            Record::ClassRemoved {
                job: JobId(1),
                name: "d".into(),
            },
        ];
        for n in 0..=records.len() {
            let live = Live::of(&records[..n]);
            assert_eq!(live.len(), live.records().len(), "after {n} records");
        }
        let live = Live::of(&records).records();
        assert_eq!(live[3..], [excluded("c"), pending(4, 2)]);
        // The job's end forgets them all.
        let mut ended = records.clone();
        ended.push(Record::Ended { job: JobId(1) });
        assert_eq!(Live::of(&ended).records().len(), 1);
    }

    #[test]
    fn hosts_held_live_until_freed_or_their_job_ends() {
        let claimed = |job: u64, host: u64| Record::Claimed {
            job: JobId(job),
            host: HostId(host),
            class: "c".into(),
        };
        let records = vec![
            submitted(1),
            submitted(2),
            claimed(1, 1),
            claimed(1, 2),
            claimed(2, 3),
            // Freed by job 1, then another job's: the later record counts.
            Record::Freed {
                job: JobId(1),
                host: HostId(2),
            },
            claimed(2, 2),
            // A stale `Freed` of another job changes nothing.
            Record::Freed {
                job: JobId(1),
                host: HostId(3),
            },
            // Claimed for a job that is not live: ignored.
            claimed(9, 4),
        ];
        for n in 0..=records.len() {
            let live = Live::of(&records[..n]);
            assert_eq!(live.len(), live.records().len(), "after {n} records");
        }
        let live = Live::of(&records).records();
        assert_eq!(live[3..], [claimed(1, 1), claimed(2, 2), claimed(2, 3)]);
        let mut ended = records.clone();
        ended.push(Record::Ended { job: JobId(2) });
        assert_eq!(Live::of(&ended).records()[2..], [claimed(1, 1)]);
        assert_eq!(
            Live::of(&live).records(),
            live,
            "compacting again changes nothing"
        );
    }
}
