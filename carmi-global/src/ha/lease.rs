//! The lease: an exclusive lock on a file all managers share (`--ha-lock`),
//! held by the active manager for as long as it serves, and the few lines
//! it keeps in that file: the epoch, who is active, where it serves and
//! which standbys hold everything it acknowledged.
//!
//! The lock is the kernel's (`flock` through [`File::try_lock`]): it goes
//! with the process, SIGKILL included. On NFS the lock is a lease of the
//! server's: a holder cut from the server loses it after the server's grace
//! period, so the active rewrites the file every [`RENEW_PERIOD`] and steps
//! down (exits) when it cannot (docs/standby.md).

use std::fs::{File, OpenOptions};
use std::io::ErrorKind;
use std::os::unix::fs::{FileExt, MetadataExt};
use std::path::{Path, PathBuf};
use std::time::Duration;

/// How often the active rewrites the lease file, proving it can still
/// reach the shared storage.
pub const RENEW_PERIOD: Duration = Duration::from_secs(1);

/// What the lease file says.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct LeaseInfo {
    /// Bumped by each manager that becomes active; 0 for a pool that never
    /// had one. A replication stream of an older epoch is refused.
    pub epoch: u64,
    /// The active manager's replication name (its `--ha-listen`).
    pub active: String,
    /// Where the active manager serves the pool (its `--listen`).
    pub serving: String,
    /// The standbys (replication names) that hold every record the active
    /// acknowledged: only they (or the active itself) may take over.
    pub in_sync: Vec<String>,
    /// When it was last rewritten (seconds since the Unix epoch).
    pub renewed_unix: u64,
}

impl LeaseInfo {
    /// The file's text.
    pub fn to_text(&self) -> String {
        format!(
            "epoch {}\nactive {}\nserving {}\nin-sync {}\nrenewed {}\n",
            self.epoch,
            self.active,
            self.serving,
            self.in_sync.join(","),
            self.renewed_unix
        )
    }

    /// Reads the file's text; an empty file is a pool that never had an
    /// active manager.
    pub fn parse(text: &str) -> Result<LeaseInfo, String> {
        let mut info = LeaseInfo::default();
        for line in text.lines().map(str::trim).filter(|l| !l.is_empty()) {
            let (key, value) = line.split_once(' ').unwrap_or((line, ""));
            let value = value.trim();
            match key {
                "epoch" => info.epoch = number(line, value)?,
                "active" => info.active = value.to_string(),
                "serving" => info.serving = value.to_string(),
                "in-sync" => {
                    info.in_sync = value
                        .split(',')
                        .map(str::trim)
                        .filter(|s| !s.is_empty())
                        .map(str::to_string)
                        .collect()
                }
                "renewed" => info.renewed_unix = number(line, value)?,
                _ => return Err(format!("unknown line `{line}`")),
            }
        }
        Ok(info)
    }

    /// Whether the manager named `me`, whose state directory last held the
    /// whole state of epoch `mine` (its `ha-state` file), may become
    /// active: in a pool that never had an active manager anyone may;
    /// otherwise only the last active one or a standby it kept in sync,
    /// with the state of that same epoch. The reason otherwise.
    pub fn may_take_over(&self, me: &str, mine: Option<u64>) -> Result<(), String> {
        if self.epoch == 0 {
            return Ok(());
        }
        let named = self.active == me || self.in_sync.iter().any(|s| s == me);
        match mine {
            Some(e) if e == self.epoch && named => Ok(()),
            Some(e) if e == self.epoch => Err(format!(
                "the last active manager ({}) had dropped this standby from its in-sync set [{}]: \
                 its state may lack acknowledged records",
                self.active,
                self.in_sync.join(",")
            )),
            Some(e) => Err(format!(
                "this state directory holds epoch {e}, the pool is at epoch {}",
                self.epoch
            )),
            None => Err(format!(
                "this state directory never finished a copy of the pool's state (epoch {})",
                self.epoch
            )),
        }
    }
}

fn number(line: &str, value: &str) -> Result<u64, String> {
    value
        .parse()
        .map_err(|_| format!("`{line}`: `{value}` is not a number"))
}

/// Reads the lease file at `path` (a missing file reads as a fresh pool).
pub fn read(path: &Path) -> Result<LeaseInfo, String> {
    match std::fs::read_to_string(path) {
        Ok(text) => LeaseInfo::parse(&text).map_err(|e| format!("{}: {e}", path.display())),
        Err(e) if e.kind() == ErrorKind::NotFound => Ok(LeaseInfo::default()),
        Err(e) => Err(format!("{}: {e}", path.display())),
    }
}

/// The lock, held: dropping it (or the process ending) lets another
/// manager take it.
#[derive(Debug)]
pub struct Lease {
    path: PathBuf,
    file: File,
}

impl Lease {
    /// Takes the lock on `path` (creating the file) if no one holds it;
    /// `None` if someone does.
    pub fn try_take(path: &Path) -> std::io::Result<Option<Lease>> {
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(path)?;
        match file.try_lock() {
            Ok(()) => Ok(Some(Lease {
                path: path.to_path_buf(),
                file,
            })),
            Err(std::fs::TryLockError::WouldBlock) => Ok(None),
            Err(std::fs::TryLockError::Error(e)) => Err(e),
        }
    }

    /// Where it is.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// What the file says now.
    pub fn read(&self) -> Result<LeaseInfo, String> {
        read(&self.path)
    }

    /// Rewrites the file in place (the lock is on this open file: a renamed
    /// copy would not carry it) and syncs it; fails if the path no longer
    /// names the locked file (removed or replaced: another manager could
    /// lock the new one).
    pub fn write(&self, info: &LeaseInfo) -> std::io::Result<()> {
        let on_disk = std::fs::metadata(&self.path)?;
        let held = self.file.metadata()?;
        if (on_disk.dev(), on_disk.ino()) != (held.dev(), held.ino()) {
            return Err(std::io::Error::other(format!(
                "{} is no longer the file this manager locked (removed or replaced)",
                self.path.display()
            )));
        }
        let text = info.to_text();
        self.file.set_len(0)?;
        self.file.write_all_at(text.as_bytes(), 0)?;
        self.file.sync_data()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_file_reads_back_and_names_who_may_take_over() {
        let info = LeaseInfo {
            epoch: 3,
            active: "a:9700".into(),
            serving: "a:9618".into(),
            in_sync: vec!["b:9700".into()],
            renewed_unix: 17,
        };
        assert_eq!(LeaseInfo::parse(&info.to_text()).unwrap(), info);
        assert_eq!(LeaseInfo::parse("").unwrap(), LeaseInfo::default());
        assert!(
            LeaseInfo::parse("epoch x")
                .unwrap_err()
                .contains("not a number")
        );
        assert!(info.may_take_over("b:9700", Some(3)).is_ok());
        assert!(info.may_take_over("a:9700", Some(3)).is_ok());
        let dropped = info.may_take_over("c:9700", Some(3)).unwrap_err();
        assert!(dropped.contains("dropped this standby"), "{dropped}");
        assert!(info.may_take_over("b:9700", Some(2)).is_err());
        assert!(info.may_take_over("b:9700", None).is_err());
        assert!(LeaseInfo::default().may_take_over("c:9700", None).is_ok());
    }

    #[test]
    fn one_holder_at_a_time_and_the_lock_goes_with_its_holder() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("lease");
        let first = Lease::try_take(&path).unwrap().expect("free");
        assert!(Lease::try_take(&path).unwrap().is_none());
        let info = LeaseInfo {
            epoch: 1,
            ..LeaseInfo::default()
        };
        first.write(&info).unwrap();
        assert_eq!(read(&path).unwrap(), info);
        drop(first);
        let second = Lease::try_take(&path).unwrap().expect("freed");
        std::fs::remove_file(&path).unwrap();
        assert!(
            second.write(&info).is_err(),
            "a removed lease file is not held"
        );
    }
}
