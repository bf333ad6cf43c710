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

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};

use carmi_api::ids::{HostId, JobId, ProcessId};
use carmi_api::msg::SubmitRequest;
use serde::{Deserialize, Serialize};

use crate::alloc::ReqRef;

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
}

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
        Ok((Journal { path, file }, records, damage))
    }

    /// Appends records and waits until they are on disk.
    pub fn append(&mut self, records: &[Record]) -> std::io::Result<()> {
        let text: String = records.iter().map(encode).collect();
        self.file.write_all(text.as_bytes())?;
        self.file.sync_data()
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
            }),
        }
    }

    fn sample() -> (Vec<Record>, Vec<u8>) {
        let records = vec![
            submitted(1),
            Record::Started {
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
}
