//! Job isolation: a local RM started as root runs each job's processes as
//! an unprivileged account of its own, as HTCondor's slot users, so that a
//! job can read neither the local RM's key and token files, nor its state
//! directory, nor another job's sandbox.
//!
//! The accounts are a configured list (`--slot-users carmi-slot1,...`) or
//! a prefix (`--slot-user-prefix carmi-slot`: `carmi-slot1` ... one per slot
//! and two for masters, the first names no other local RM of this machine
//! holds, created with `useradd` when missing): see [`crate::slot_users`].
//! They must be dedicated to the pool: each serves one job at a time (a
//! lease), and when a job's last process on an account has exited, every
//! process still running as that account is killed, so that a process that
//! left its group (`setsid`) does not outlive its job or spy on the next one.
//!
//! What is done as the account rather than as root: the process itself
//! (`setgid`, `setgroups(0)`, `setuid` before `exec`, by std's `Command`),
//! and the opening of the paths a submitter names (a master's input files
//! and standard output and error outside its sandbox), under the waiting
//! thread's file-system ids ([`as_account`]), so that a job cannot make the
//! root daemon read or overwrite a file of the machine for it.
//!
//! Started as an ordinary user, the local RM cannot switch accounts: it says
//! so once at start-up ([`notice`]) and runs jobs as itself.

use std::fs::{self, File};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use carmi_api::ids::JobId;
use nix::fcntl::Flock;
use nix::unistd::{Gid, Uid, User};

use crate::slot_users::kill_account;
pub use crate::slot_users::{Account, LOCK_DIR, SPARE_ACCOUNTS, SlotUserError, Source};

/// Which accounts run jobs, as configured.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum AccountsConfig {
    /// Not configured: as root, the prefix [`DEFAULT_PREFIX`]; as an
    /// ordinary user, the daemon's own account (with a start-up notice).
    #[default]
    Default,
    /// Jobs run as the daemon's own user, even as root (`--slot-users none`).
    Own,
    /// These accounts, which must exist (at least one per slot and two more).
    Users(Vec<String>),
    /// `PREFIX1`, `PREFIX2`, ...: one per slot and two more, the first free
    /// ones on this machine, created if missing.
    Prefix(String),
}

/// The prefix of the accounts a root local RM makes when none are configured.
pub const DEFAULT_PREFIX: &str = "carmi-slot";

/// Why isolation cannot be set up.
#[derive(Debug, thiserror::Error)]
pub enum IsolationError {
    /// The accounts cannot be had (missing, held by another local RM,
    /// too few, privileged).
    #[error(transparent)]
    Accounts(#[from] SlotUserError),
    /// Accounts were configured but the daemon is not root.
    #[error(
        "slot users need a local RM started as root (this one runs as uid {0}); remove --slot-users/--slot-user-prefix or start it as root"
    )]
    NotRoot(u32),
    /// A directory on the way to the sandboxes is closed to other users.
    #[error(
        "directory {0} must be searchable by the slot users (mode o+x) so that they can reach their sandboxes; chmod o+x it or choose a --work-dir under /var/lib"
    )]
    Unreachable(PathBuf),
    /// The work directory's modes could not be set.
    #[error("cannot restrict {path}: {error}")]
    Restrict {
        /// The file or directory.
        path: PathBuf,
        /// Why.
        error: std::io::Error,
    },
}

/// The accounts of a local RM and which job holds each.
#[derive(Clone, Debug)]
pub struct Accounts {
    accounts: Arc<Vec<Account>>,
    /// Per account: the job using it and how many of its processes.
    leases: Arc<Mutex<Vec<Option<JobLease>>>>,
    /// Held while the daemon runs: no other local RM of this machine takes
    /// these accounts ([`LOCK_DIR`]).
    _locks: Arc<Vec<Flock<File>>>,
}

/// The job an account serves, and how many of its processes run as it.
type JobLease = (JobId, usize);

/// What the daemon's start-up says about isolation, once: `None` when each
/// job runs as an account of its own.
pub fn notice(euid: u32, own_name: &str, config: &AccountsConfig) -> Option<String> {
    match (euid, config) {
        (0, AccountsConfig::Own) => Some(
            "started as root with no slot users (--slot-users none, or in an embedded pool): job \
             processes run as root and can read this local RM's key and token files, its state \
             directory and every other job's sandbox"
                .into(),
        ),
        (0, _) => None,
        (_, _) => Some(format!(
            "started as the ordinary user `{own_name}` (uid {euid}): job processes run as \
             `{own_name}` too, so a job can read this local RM's key and token files, its state \
             directory and other jobs' sandboxes on this machine; start it as root (with \
             --slot-users or --slot-user-prefix) to run each job as an account of its own"
        )),
    }
}

/// Sets up the accounts `config` asks for at the daemon's start: the
/// work directory closed to them, what an earlier run left running as them
/// killed; or, when jobs run as the daemon's own user, says so once.
pub fn start(
    config: &AccountsConfig,
    slots: u32,
    work_dir: &Path,
) -> Result<Option<Accounts>, IsolationError> {
    let accounts = Accounts::set_up(config, slots)?;
    match &accounts {
        Some(accounts) => {
            restrict_work_dir(work_dir)?;
            accounts.kill_all();
            let names: Vec<&str> = accounts.list().iter().map(|a| a.name.as_str()).collect();
            tracing::info!(accounts = %names.join(","), "job processes run as slot users, one job per account");
        }
        None => {
            let euid = nix::unistd::geteuid();
            let name = User::from_uid(euid)
                .ok()
                .flatten()
                .map_or_else(|| euid.to_string(), |u| u.name);
            if let Some(text) = notice(euid.as_raw(), &name, config) {
                tracing::warn!("{text}");
            }
        }
    }
    Ok(accounts)
}

impl Accounts {
    /// The accounts `config` asks for on a machine with `slots` slots, or
    /// `None` when jobs run as the daemon's own user: exactly one per slot
    /// and [`SPARE_ACCOUNTS`] more of a prefix (created when missing), or
    /// every listed one ([`crate::slot_users::claim`]).
    pub fn set_up(config: &AccountsConfig, slots: u32) -> Result<Option<Accounts>, IsolationError> {
        let euid = nix::unistd::geteuid().as_raw();
        let source = match config {
            AccountsConfig::Own => return Ok(None),
            AccountsConfig::Default if euid != 0 => return Ok(None),
            _ if euid != 0 => return Err(IsolationError::NotRoot(euid)),
            AccountsConfig::Users(names) => Source::Listed(names),
            AccountsConfig::Default => Source::Prefix(DEFAULT_PREFIX),
            AccountsConfig::Prefix(prefix) => Source::Prefix(prefix),
        };
        let claimed = crate::slot_users::claim(source, slots)?;
        let leases = vec![None; claimed.accounts.len()];
        Ok(Some(Accounts {
            accounts: Arc::new(claimed.accounts),
            leases: Arc::new(Mutex::new(leases)),
            _locks: Arc::new(claimed.locks),
        }))
    }

    /// The accounts, in order.
    pub fn list(&self) -> &[Account] {
        &self.accounts
    }

    /// An account for a process of `job`: the one its other processes here
    /// use, else one no job uses; `None` when every account serves another job.
    pub fn lease(&self, job: JobId) -> Option<Lease> {
        let mut leases = self.leases.lock().unwrap_or_else(|e| e.into_inner());
        let index = leases
            .iter()
            .position(|l| matches!(l, Some((j, _)) if *j == job))
            .or_else(|| leases.iter().position(Option::is_none))?;
        let entry = leases[index].get_or_insert((job, 0));
        entry.1 += 1;
        Some(Lease {
            accounts: self.clone(),
            index,
        })
    }

    /// Kills every process of every account: what an earlier run of the
    /// daemon left behind (call before the first launch).
    pub fn kill_all(&self) {
        for a in self.accounts.iter() {
            kill_account(a.uid);
        }
    }
}

/// An account held for one process of a job; given back when dropped.
#[derive(Debug)]
pub struct Lease {
    accounts: Accounts,
    index: usize,
}

impl Lease {
    /// The account.
    pub fn account(&self) -> &Account {
        &self.accounts.accounts[self.index]
    }
}

impl Drop for Lease {
    fn drop(&mut self) {
        let mut leases = self
            .accounts
            .leases
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        let last = match &mut leases[self.index] {
            Some((_, n)) if *n > 1 => {
                *n -= 1;
                false
            }
            _ => true,
        };
        if last {
            // Before the account serves another job: nothing of this one
            // may run on as it.
            kill_account(self.account().uid);
            leases[self.index] = None;
        }
    }
}

/// Runs `f` with this thread's file-system ids set to `account`'s, so that
/// the files it opens are checked (and created) as that account's; then
/// back to the daemon's. Call only from a thread of its own (a process's
/// waiting thread): the ids are per thread.
pub fn as_account<T>(account: &Account, f: impl FnOnce() -> T) -> T {
    let (uid, gid) = (nix::unistd::geteuid(), nix::unistd::getegid());
    nix::unistd::setfsgid(Gid::from_raw(account.gid));
    nix::unistd::setfsuid(Uid::from_raw(account.uid));
    let result = f();
    nix::unistd::setfsuid(uid);
    nix::unistd::setfsgid(gid);
    result
}

/// Sets the modes of the work directory for slot users: they may pass
/// through it and `sandbox/` to their own sandbox (and read `machine.ad`),
/// but list and read nothing else: not the executable cache, the outputs
/// kept for other jobs, nor the records of process groups. Refuses a work
/// directory that a slot user cannot reach.
pub fn restrict_work_dir(work_dir: &Path) -> Result<(), IsolationError> {
    let set = |path: &Path, mode: u32| {
        fs::create_dir_all(path)
            .and_then(|()| fs::set_permissions(path, fs::Permissions::from_mode(mode)))
            .map_err(|error| IsolationError::Restrict {
                path: path.to_path_buf(),
                error,
            })
    };
    set(work_dir, 0o711)?;
    let entries = fs::read_dir(work_dir).map_err(|error| IsolationError::Restrict {
        path: work_dir.to_path_buf(),
        error,
    })?;
    for entry in entries.flatten() {
        let name = entry.file_name();
        let path = entry.path();
        match name.to_str() {
            Some("sandbox") | Some("machine.ad") => {}
            _ if path.is_dir() => set(&path, 0o700)?,
            _ => {
                fs::set_permissions(&path, fs::Permissions::from_mode(0o600)).map_err(|error| {
                    IsolationError::Restrict {
                        path: path.clone(),
                        error,
                    }
                })?
            }
        }
    }
    for dir in ["cache", "output", "groups"] {
        set(&work_dir.join(dir), 0o700)?;
    }
    set(&work_dir.join("sandbox"), 0o711)?;
    for dir in work_dir.ancestors().skip(1) {
        let mode = fs::metadata(dir)
            .map(|m| m.permissions().mode())
            .unwrap_or(0);
        if mode & 0o001 == 0 {
            return Err(IsolationError::Unreachable(dir.to_path_buf()));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_start_up_notice_names_the_isolation_that_is_missing() {
        let plain = notice(1000, "alice", &AccountsConfig::Default).expect("a notice");
        assert!(plain.contains("`alice` (uid 1000)") && plain.contains("key and token files"));
        assert!(notice(1000, "alice", &AccountsConfig::Own).is_some());
        assert_eq!(notice(0, "root", &AccountsConfig::Default), None);
        assert_eq!(notice(0, "root", &AccountsConfig::Prefix("x".into())), None);
        let open = notice(0, "root", &AccountsConfig::Own).expect("a notice");
        assert!(open.contains("run as root"), "{open}");
    }

    #[test]
    fn an_account_serves_one_job_at_a_time() {
        let accounts = Accounts {
            accounts: Arc::new(vec![
                Account {
                    name: "a".into(),
                    uid: u32::MAX - 1,
                    gid: 1,
                },
                Account {
                    name: "b".into(),
                    uid: u32::MAX - 2,
                    gid: 1,
                },
            ]),
            leases: Arc::new(Mutex::new(vec![None, None])),
            _locks: Arc::new(Vec::new()),
        };
        let j1 = accounts.lease(JobId(1)).expect("free");
        let j1_again = accounts.lease(JobId(1)).expect("shared within the job");
        assert_eq!(j1.account(), j1_again.account());
        let j2 = accounts.lease(JobId(2)).expect("the other account");
        assert_ne!(j1.account(), j2.account());
        assert!(accounts.lease(JobId(3)).is_none(), "both serve other jobs");
        drop(j1);
        assert!(
            accounts.lease(JobId(3)).is_none(),
            "job 1 still has a process"
        );
        drop(j1_again);
        let j3 = accounts.lease(JobId(3)).expect("given back by job 1");
        assert_eq!(j3.account().name, "a");
    }
}
