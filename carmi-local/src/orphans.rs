//! Records on disk of the process groups this local RM started, so that a
//! restarted local RM finds and kills whatever an earlier run left behind.
//!
//! A local RM that is SIGKILLed (or crashes past its drop guards) cannot kill
//! its processes. The group leader itself dies with it (`PR_SET_PDEATHSIG`,
//! see [`crate::spawn`]), but everything the leader started stays, orphaned.
//! So each group is written down in `WORK_DIR/groups/<pgid>` as soon as it is
//! started, and removed once it has been reaped and killed; whatever is still
//! recorded when the daemon starts belongs to a run that died. [`GroupRecords::sweep`]
//! SIGKILLs every such group still alive.
//!
//! A record holds the leader's start time (in clock ticks since boot, from
//! `/proc/PID/stat`) and the boot id, so that a pid reused by an unrelated
//! process is never killed: a live leader must have the recorded start time,
//! and the kernel does not hand out a group's id as a new pid while any member
//! of the group lives, so members of a group whose leader is gone are the
//! leader's own. Records from an earlier boot are dropped unread.

use std::fs;
use std::io;
use std::path::{Path, PathBuf};

use carmi_api::ids::{JobId, ProcessId};

/// The process groups of one work directory, on disk.
#[derive(Clone, Debug)]
pub struct GroupRecords {
    dir: PathBuf,
}

/// What a record says about one started group.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GroupRecord {
    /// The group id (= the leader's pid).
    pub pgid: i32,
    /// The leader's start time, in clock ticks after boot.
    pub start: u64,
    /// The boot the record was written in.
    pub boot: String,
    /// The CARMI process the group runs.
    pub process: ProcessId,
    /// Its job.
    pub job: JobId,
}

impl GroupRecord {
    fn to_line(&self) -> String {
        format!(
            "pgid={} start={} boot={} process={} job={}\n",
            self.pgid, self.start, self.boot, self.process.0, self.job.0
        )
    }

    fn parse(text: &str) -> Result<GroupRecord, String> {
        let mut fields = std::collections::HashMap::new();
        for word in text.split_whitespace() {
            let (k, v) = word
                .split_once('=')
                .ok_or_else(|| format!("`{word}` is not key=value"))?;
            fields.insert(k, v);
        }
        let get = |k: &str| fields.get(k).copied().ok_or(format!("no `{k}`"));
        let num = |k: &str| -> Result<u64, String> {
            get(k)?
                .parse()
                .map_err(|e| format!("`{k}` is not a number: {e}"))
        };
        let pgid = i32::try_from(num("pgid")?).map_err(|_| "`pgid` is out of range".to_string())?;
        Ok(GroupRecord {
            pgid,
            start: num("start")?,
            boot: get("boot")?.to_string(),
            process: ProcessId(num("process")?),
            job: JobId(num("job")?),
        })
    }
}

/// What [`GroupRecords::sweep`] did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Sweep {
    /// Groups found alive and SIGKILLed, with the number of live processes in each.
    pub killed: Vec<(GroupRecord, usize)>,
    /// Records dropped: group gone, pid reused, earlier boot, or unreadable.
    pub dropped: usize,
}

/// One line of `/proc/PID/stat`, the fields we need.
#[derive(Clone, Copy, Debug)]
struct Stat {
    pid: i32,
    pgid: i32,
    start: u64,
    zombie: bool,
}

fn read_stat(pid: i32) -> Option<Stat> {
    let text = fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name is in parentheses and may itself hold `)` and spaces.
    let rest = text.rsplit_once(')')?.1;
    let f: Vec<&str> = rest.split_whitespace().collect();
    // `f[0]` is field 3 (state) of proc(5); pgrp is field 5, starttime 22.
    Some(Stat {
        pid,
        pgid: f.get(2)?.parse().ok()?,
        start: f.get(19)?.parse().ok()?,
        zombie: matches!(*f.first()?, "Z" | "X"),
    })
}

fn all_stats() -> Vec<Stat> {
    let Ok(entries) = fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<i32>().ok())
        .filter_map(read_stat)
        .collect()
}

/// This boot's id; empty if the kernel does not tell (then every record
/// counts as this boot's and the start-time check alone guards).
fn boot_id() -> String {
    fs::read_to_string("/proc/sys/kernel/random/boot_id")
        .map(|s| s.trim().to_string())
        .unwrap_or_default()
}

impl GroupRecords {
    /// The records of `work_dir` (in its `groups/` subdirectory).
    pub fn new(work_dir: &Path) -> GroupRecords {
        GroupRecords {
            dir: work_dir.join("groups"),
        }
    }

    fn path(&self, pgid: i32) -> PathBuf {
        self.dir.join(pgid.to_string())
    }

    /// Writes down group `pgid`, just started for `process` of `job`. Written
    /// to a temporary file and renamed, so that a crash leaves either no
    /// record or a whole one.
    pub fn record(&self, pgid: i32, process: ProcessId, job: JobId) -> io::Result<()> {
        let start = read_stat(pgid)
            .map(|s| s.start)
            .ok_or_else(|| io::Error::other(format!("process {pgid} is not in /proc")))?;
        let rec = GroupRecord {
            pgid,
            start,
            boot: boot_id(),
            process,
            job,
        };
        fs::create_dir_all(&self.dir)?;
        let tmp = self.dir.join(format!(".{pgid}.tmp"));
        fs::write(&tmp, rec.to_line())?;
        fs::rename(&tmp, self.path(pgid))
    }

    /// Forgets group `pgid` (reaped, and its leftovers killed).
    pub fn remove(&self, pgid: i32) {
        let path = self.path(pgid);
        if let Err(e) = fs::remove_file(&path)
            && e.kind() != io::ErrorKind::NotFound
        {
            tracing::warn!(path = %path.display(), error = %e, "cannot remove a process group record");
        }
    }

    /// Kills (SIGKILL) every recorded group that still has live processes
    /// and removes every record. Called at start-up, before any process of
    /// this run starts, so that every record is an earlier run's.
    pub fn sweep(&self) -> Sweep {
        let mut out = Sweep::default();
        let entries = match fs::read_dir(&self.dir) {
            Ok(e) => e,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return out,
            Err(e) => {
                tracing::warn!(path = %self.dir.display(), error = %e, "cannot read process group records; processes of an earlier run may be left running");
                return out;
            }
        };
        let boot = boot_id();
        let stats = all_stats();
        for entry in entries.flatten() {
            let path = entry.path();
            let record = fs::read_to_string(&path)
                .map_err(|e| e.to_string())
                .and_then(|t| GroupRecord::parse(&t));
            match record {
                Err(why) => {
                    // A temporary file of a write cut short ends up here too.
                    tracing::warn!(path = %path.display(), error = %why, "unreadable process group record dropped");
                    out.dropped += 1;
                }
                Ok(rec) => match leftovers(&rec, &boot, &stats) {
                    0 => out.dropped += 1,
                    n => {
                        // SAFETY: kill has no memory effects; `rec.pgid > 1` (checked in `leftovers`).
                        let sent = unsafe { libc::kill(-rec.pgid, libc::SIGKILL) } == 0;
                        tracing::warn!(
                            pgid = rec.pgid,
                            process = %rec.process,
                            job = %rec.job,
                            processes = n,
                            sent,
                            "killed processes left running by an earlier run of this local RM"
                        );
                        out.killed.push((rec, n));
                    }
                },
            }
            if let Err(e) = fs::remove_file(&path) {
                tracing::warn!(path = %path.display(), error = %e, "cannot remove a process group record");
            }
        }
        out
    }
}

/// How many live processes of `rec`'s group are still there, 0 if the group
/// is gone or its id now belongs to someone else.
fn leftovers(rec: &GroupRecord, boot: &str, stats: &[Stat]) -> usize {
    if rec.pgid <= 1 || (!boot.is_empty() && !rec.boot.is_empty() && rec.boot != boot) {
        return 0;
    }
    if let Some(leader) = stats.iter().find(|s| s.pid == rec.pgid && !s.zombie)
        && leader.start != rec.start
    {
        // The pid was given to another process: the group is not ours.
        return 0;
    }
    stats
        .iter()
        .filter(|s| s.pgid == rec.pgid && !s.zombie && s.start >= rec.start)
        .count()
}

/// True while process `pid` exists and is not a zombie (from `/proc`), for
/// tests and tools that check that a process group really died; the daemon
/// itself learns of exits from `wait4`. Here, below `spawn` (which
/// re-exports it), so that this module's tests need not use `spawn`.
pub fn alive(pid: i32) -> bool {
    match fs::read_to_string(format!("/proc/{pid}/stat")) {
        // The state follows the command name, which may itself hold `)`.
        Ok(stat) => !stat
            .rsplit_once(')')
            .is_some_and(|(_, rest)| rest.trim_start().starts_with('Z')),
        Err(_) => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_dir::TempDir;
    use std::os::unix::process::CommandExt;
    use std::process::Command;

    fn own_group(script: &str) -> std::process::Child {
        let mut cmd = Command::new("/bin/sh");
        cmd.args(["-c", script]);
        // SAFETY: setsid is async-signal-safe.
        unsafe {
            cmd.pre_exec(|| {
                libc::setsid();
                Ok(())
            });
        }
        cmd.spawn().expect("start sh")
    }

    fn wait_until(what: &str, mut cond: impl FnMut() -> bool) {
        let t = std::time::Instant::now();
        while !cond() {
            assert!(
                t.elapsed() < std::time::Duration::from_secs(10),
                "timed out waiting for {what}"
            );
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
    }

    fn members(pgid: i32) -> usize {
        all_stats()
            .iter()
            .filter(|s| s.pgid == pgid && !s.zombie)
            .count()
    }

    #[test]
    fn a_record_reads_back_and_garbage_is_refused() {
        let rec = GroupRecord {
            pgid: 42,
            start: 7,
            boot: "b".into(),
            process: ProcessId(3),
            job: JobId(9),
        };
        assert_eq!(GroupRecord::parse(&rec.to_line()), Ok(rec));
        assert!(GroupRecord::parse("pgid=x start=1").is_err());
        assert!(GroupRecord::parse("pgid=99999999999 start=1 boot=b process=1 job=1").is_err());
        assert!(GroupRecord::parse("").is_err());
    }

    #[test]
    fn a_recorded_group_left_alive_is_killed_and_its_record_removed() {
        let dir = TempDir::new("orphans");
        let records = GroupRecords::new(dir.path());
        let mut leader = own_group("sleep 300 & sleep 300 & wait");
        let pgid = leader.id() as i32;
        records.record(pgid, ProcessId(5), JobId(2)).unwrap();
        wait_until("three members", || members(pgid) == 3);
        // A garbage record is dropped, not fatal.
        fs::write(dir.path().join("groups/garbage"), "what").unwrap();
        let sweep = records.sweep();
        assert_eq!(sweep.killed.len(), 1, "{sweep:?}");
        assert_eq!(sweep.killed[0].1, 3);
        assert_eq!(sweep.dropped, 1);
        leader.wait().unwrap();
        wait_until("the group to die", || members(pgid) == 0);
        assert_eq!(fs::read_dir(dir.path().join("groups")).unwrap().count(), 0);
    }

    #[test]
    fn a_reused_pid_or_an_earlier_boot_is_never_killed() {
        let dir = TempDir::new("orphans-reuse");
        let records = GroupRecords::new(dir.path());
        let mut other = own_group("sleep 300");
        let pgid = other.id() as i32;
        let start = read_stat(pgid).unwrap().start;
        let write = |rec: GroupRecord| {
            fs::create_dir_all(dir.path().join("groups")).unwrap();
            fs::write(dir.path().join("groups").join("r"), rec.to_line()).unwrap();
        };
        let rec = |start, boot: &str| GroupRecord {
            pgid,
            start,
            boot: boot.into(),
            process: ProcessId(1),
            job: JobId(1),
        };
        // The recorded leader started earlier: this pid is someone else's now.
        write(rec(start.saturating_sub(1), &boot_id()));
        assert_eq!(records.sweep().killed.len(), 0);
        write(rec(start, "another-boot"));
        assert_eq!(records.sweep().killed.len(), 0);
        assert!(alive(pgid));
        other.kill().unwrap();
        other.wait().unwrap();
    }
}
