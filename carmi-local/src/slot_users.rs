//! The slot users' accounts of this machine ([`crate::isolation`]): which
//! ones a root local RM takes, the locks that keep them its own while it
//! runs, their creation with `useradd`, and their removal
//! (`carmi-local --remove-slot-users`).
//!
//! A local RM takes exactly [`wanted`] accounts, one per slot and
//! [`SPARE_ACCOUNTS`] more: the ones `--slot-users` lists (all of them, at
//! least that many), or `PREFIX1`, `PREFIX2`, ... skipping the names another
//! local RM of this machine holds ([`choose`]), creating only those missing.
//! It holds each with an exclusive `flock` on `LOCK_DIR/NAME.lock`, which
//! holds its pid, so that another local RM can say who has the account. It
//! chooses, creates and locks them under one machine-wide lock
//! (`LOCK_DIR/.claim.lock`), so that two local RMs starting at the same
//! moment can neither both take one account nor both go without. One that
//! cannot get its accounts refuses to start, naming them and their holders.

use std::fmt;
use std::fs::{self, File};
use std::io::Read;
use std::os::unix::fs::{FileExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::Command;

use nix::errno::Errno;
use nix::fcntl::{Flock, FlockArg};
use nix::unistd::{Group, User};

/// Where a local RM marks the slot users it holds (one lock file each,
/// `flock`ed while it runs, holding its pid), so that two local RMs on one
/// machine never run jobs as the same account (each kills what runs as its
/// accounts).
pub const LOCK_DIR: &str = "/run/carmi-local";

/// The machine-wide lock held while a local RM chooses, creates and locks
/// its accounts, and while `--remove-slot-users` deletes some (a leading dot:
/// no account name starts with one).
const CLAIM_LOCK: &str = ".claim.lock";

/// Accounts beyond one per slot: for masters, which run outside the slots,
/// and a job that finishes while the next one starts.
pub const SPARE_ACCOUNTS: u32 = 2;

/// The last index a prefix gives (`PREFIX4096`): a machine has at most 1,024
/// slots, so this is room for several local RMs, and a bound on the search.
pub const MAX_PREFIX_INDEX: u32 = 4096;

/// The comment (`GECOS`) of the accounts a prefix makes.
pub const COMMENT: &str = "carmi-local slot user";

/// One account that job processes run as.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Account {
    /// Its user name.
    pub name: String,
    /// Its uid.
    pub uid: u32,
    /// Its primary group.
    pub gid: u32,
}

/// Where a local RM's accounts come from.
#[derive(Clone, Copy, Debug)]
pub enum Source<'a> {
    /// These accounts, which must exist.
    Listed(&'a [String]),
    /// `PREFIX1`, `PREFIX2`, ...: the first free ones, made if missing.
    Prefix(&'a str),
}

/// An account another local RM of this machine holds.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Held {
    /// The account.
    pub name: String,
    /// The pid its lock file names, if any.
    pub pid: Option<u32>,
}

impl fmt::Display for Held {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.pid {
            Some(pid) => write!(f, "`{}` (held by the local RM with pid {pid})", self.name),
            None => write!(
                f,
                "`{}` (held by another local RM; {} names no pid)",
                self.name,
                lock_path(&self.name).display()
            ),
        }
    }
}

fn list(held: &[Held]) -> String {
    held.iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join(", ")
}

/// Why a local RM cannot have its accounts, or they cannot be removed.
#[derive(Debug, thiserror::Error)]
pub enum SlotUserError {
    /// A listed account does not exist.
    #[error(
        "slot user `{0}` does not exist; create it (`useradd --system {0}`) or use --slot-user-prefix, which creates its accounts"
    )]
    NoSuchUser(String),
    /// Accounts this local RM needs run the jobs of other local RMs here.
    #[error(
        "slot users that other local RMs of this machine hold: {}; give each local RM accounts of its own (--slot-users), or a prefix (--slot-user-prefix), of which each takes the next free names",
        list(.0)
    )]
    Held(Vec<Held>),
    /// `--slot-users` lists fewer accounts than the local RM needs.
    #[error(
        "--slot-users lists {listed} account(s), but {slots} slot(s) need {want}: one per slot and {SPARE_ACCOUNTS} for masters; list more, or use --slot-user-prefix, which makes them"
    )]
    TooFew {
        /// How many are listed.
        listed: usize,
        /// How many are needed.
        want: usize,
        /// The local RM's slots.
        slots: u32,
    },
    /// Every name of the prefix up to [`MAX_PREFIX_INDEX`] is held.
    #[error(
        "slot user prefix `{prefix}` has fewer than {want} free names: {held} of {prefix}1 ... {prefix}{MAX_PREFIX_INDEX} are held by other local RMs of this machine; give this one another prefix"
    )]
    PrefixFull {
        /// The prefix.
        prefix: String,
        /// How many were needed.
        want: usize,
        /// How many are held.
        held: usize,
    },
    /// An account is root or the daemon's own.
    #[error(
        "slot user `{name}` has uid {uid}, which is root's or this daemon's own: job processes must run as a dedicated unprivileged account"
    )]
    Privileged {
        /// The account.
        name: String,
        /// Its uid.
        uid: u32,
    },
    /// `useradd` failed.
    #[error("cannot create slot user `{name}`: {reason}")]
    Create {
        /// The account.
        name: String,
        /// What `useradd` said.
        reason: String,
    },
    /// The account database could not be read.
    #[error("cannot look up slot user `{name}`: {error}")]
    Lookup {
        /// The account.
        name: String,
        /// Why.
        error: nix::Error,
    },
    /// A lock file could not be used.
    #[error("cannot lock {path}: {error}")]
    Lock {
        /// The lock file.
        path: PathBuf,
        /// Why.
        error: std::io::Error,
    },
    /// Slot users are removed by root only.
    #[error("removing slot users needs root (this runs as uid {0})")]
    NotRoot(u32),
}

/// How many accounts a local RM with `slots` slots takes.
pub fn wanted(slots: u32) -> usize {
    (slots + SPARE_ACCOUNTS) as usize
}

/// The first `want` names of `prefix` (`PREFIX1`, `PREFIX2`, ...) that are
/// not `held`; `Err` with how many were held when the names run out.
pub fn choose(
    prefix: &str,
    want: usize,
    mut held: impl FnMut(&str) -> bool,
) -> Result<Vec<String>, usize> {
    let mut names = Vec::with_capacity(want);
    let mut skipped = 0;
    for i in 1..=MAX_PREFIX_INDEX {
        if names.len() == want {
            break;
        }
        let name = format!("{prefix}{i}");
        if held(&name) {
            skipped += 1;
        } else {
            names.push(name);
        }
    }
    if names.len() == want {
        Ok(names)
    } else {
        Err(skipped)
    }
}

/// The index of `name` among `prefix`'s names (`PREFIX7` is 7), if it is one.
pub fn prefix_index(prefix: &str, name: &str) -> Option<u32> {
    let digits = name.strip_prefix(prefix)?;
    if digits.is_empty() || digits.starts_with('0') || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    digits
        .parse()
        .ok()
        .filter(|i| (1..=MAX_PREFIX_INDEX).contains(i))
}

/// A local RM's accounts and the locks that keep them its own.
#[derive(Debug, Default)]
pub struct Claimed {
    /// The accounts, in order.
    pub accounts: Vec<Account>,
    /// One lock per account, held as long as the local RM runs.
    pub locks: Vec<Flock<File>>,
}

/// Takes the accounts `source` gives a local RM with `slots` slots, under
/// the machine-wide lock: exactly [`wanted`] of a prefix (created when
/// missing), or every listed one. Refuses, naming them and their holders,
/// when they are held by other local RMs.
pub fn claim(source: Source<'_>, slots: u32) -> Result<Claimed, SlotUserError> {
    let want = wanted(slots);
    let _machine = machine_lock()?;
    let (names, create) = match source {
        Source::Listed(names) => {
            if names.len() < want {
                return Err(SlotUserError::TooFew {
                    listed: names.len(),
                    want,
                    slots,
                });
            }
            let mut held = Vec::new();
            for name in names {
                held.extend(holder(name)?);
            }
            if !held.is_empty() {
                return Err(SlotUserError::Held(held));
            }
            (names.to_vec(), false)
        }
        Source::Prefix(prefix) => {
            let mut failed = None;
            let chosen = choose(prefix, want, |name| match holder(name) {
                Ok(h) => h.is_some(),
                Err(e) => {
                    failed.get_or_insert(e);
                    true
                }
            });
            if let Some(e) = failed {
                return Err(e);
            }
            let names = chosen.map_err(|held| SlotUserError::PrefixFull {
                prefix: prefix.into(),
                want,
                held,
            })?;
            (names, true)
        }
    };
    let euid = nix::unistd::geteuid().as_raw();
    let mut claimed = Claimed::default();
    for name in names {
        // Free a moment ago, and no other local RM claims meanwhile.
        let lock = try_lock(&name)?.map_err(|held| SlotUserError::Held(vec![held]))?;
        let account = match lookup(&name)? {
            Some(a) => a,
            None if create => {
                make_account(&name)?;
                lookup(&name)?.ok_or_else(|| SlotUserError::NoSuchUser(name.clone()))?
            }
            None => return Err(SlotUserError::NoSuchUser(name)),
        };
        if account.uid == 0 || account.uid == euid {
            return Err(SlotUserError::Privileged {
                name: account.name,
                uid: account.uid,
            });
        }
        claimed.accounts.push(account);
        claimed.locks.push(lock);
    }
    Ok(claimed)
}

/// What `--remove-slot-users` did.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Removal {
    /// The accounts deleted.
    pub removed: Vec<String>,
    /// The accounts of the prefix left in place, and why.
    pub kept: Vec<(String, String)>,
    /// True when a deletion failed (rather than an account being in use).
    pub failed: bool,
}

/// Deletes the accounts of `prefix` (`PREFIX1`, ... in `/etc/passwd`) that
/// no running local RM holds and that a prefix made (their comment is
/// [`COMMENT`], or empty as in earlier versions), killing what still runs
/// as them first; says which were kept and why.
pub fn remove(prefix: &str) -> Result<Removal, SlotUserError> {
    let euid = nix::unistd::geteuid().as_raw();
    if euid != 0 {
        return Err(SlotUserError::NotRoot(euid));
    }
    let _machine = machine_lock()?;
    let passwd = fs::read_to_string("/etc/passwd").map_err(|error| SlotUserError::Lock {
        path: "/etc/passwd".into(),
        error,
    })?;
    let mut names: Vec<(u32, String)> = passwd
        .lines()
        .filter_map(|l| l.split(':').next())
        .filter_map(|n| prefix_index(prefix, n).map(|i| (i, n.to_string())))
        .collect();
    names.sort();
    let mut out = Removal::default();
    for (_, name) in names {
        let Some(user) = User::from_name(&name).map_err(|error| SlotUserError::Lookup {
            name: name.clone(),
            error,
        })?
        else {
            continue;
        };
        let comment = user.gecos.to_string_lossy().into_owned();
        if !comment.is_empty() && comment != COMMENT {
            let why = format!("its comment `{comment}` is not `{COMMENT}`: not made by a prefix");
            out.kept.push((name, why));
            continue;
        }
        // Held while it goes, so that no local RM takes it meanwhile.
        let _lock = match try_lock(&name)? {
            Ok(lock) => lock,
            Err(held) => {
                let why = match held.pid {
                    Some(pid) => format!("held by the running local RM with pid {pid}"),
                    None => "held by a running local RM".into(),
                };
                out.kept.push((name, why));
                continue;
            }
        };
        kill_account(user.uid.as_raw());
        match delete_account(&name) {
            Ok(()) => {
                let _ = fs::remove_file(lock_path(&name));
                out.removed.push(name);
            }
            Err(why) => {
                out.failed = true;
                out.kept.push((name, why));
            }
        }
    }
    Ok(out)
}

fn delete_account(name: &str) -> Result<(), String> {
    let out = Command::new("userdel")
        .arg(name)
        .output()
        .map_err(|e| format!("cannot run userdel: {e}"))?;
    if !out.status.success() {
        let said = String::from_utf8_lossy(&out.stderr).trim().to_string();
        return Err(format!("userdel failed: {said}"));
    }
    // `useradd --user-group` made a group of the same name, which userdel
    // leaves where USERGROUPS_ENAB is off.
    if Group::from_name(name).ok().flatten().is_some() {
        let _ = Command::new("groupdel").arg(name).output();
    }
    Ok(())
}

fn lock_path(name: &str) -> PathBuf {
    Path::new(LOCK_DIR).join(format!("{name}.lock"))
}

fn lock_err(path: &Path) -> impl FnOnce(std::io::Error) -> SlotUserError + use<> {
    let path = path.to_path_buf();
    move |error| SlotUserError::Lock { path, error }
}

fn open_lock(path: &Path) -> Result<File, SlotUserError> {
    let dir = Path::new(LOCK_DIR);
    fs::create_dir_all(dir)
        .and_then(|()| fs::set_permissions(dir, fs::Permissions::from_mode(0o700)))
        .map_err(lock_err(dir))?;
    fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .read(true)
        .write(true)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW)
        .open(path)
        .map_err(lock_err(path))
}

/// Blocks until this process holds the machine-wide lock.
fn machine_lock() -> Result<Flock<File>, SlotUserError> {
    let path = Path::new(LOCK_DIR).join(CLAIM_LOCK);
    let mut file = open_lock(&path)?;
    loop {
        match Flock::lock(file, FlockArg::LockExclusive) {
            Ok(lock) => return Ok(lock),
            Err((f, Errno::EINTR)) => file = f,
            Err((_, e)) => return Err(lock_err(&path)(e.into())),
        }
    }
}

/// Takes the lock of account `name` and writes this process's pid in it;
/// `Err(held)` when another process holds it.
fn try_lock(name: &str) -> Result<Result<Flock<File>, Held>, SlotUserError> {
    let path = lock_path(name);
    match Flock::lock(open_lock(&path)?, FlockArg::LockExclusiveNonblock) {
        Ok(lock) => {
            lock.set_len(0)
                .and_then(|()| lock.write_all_at(format!("{}\n", std::process::id()).as_bytes(), 0))
                .map_err(lock_err(&path))?;
            Ok(Ok(lock))
        }
        Err((mut file, Errno::EWOULDBLOCK)) => {
            let mut text = String::new();
            let _ = file.read_to_string(&mut text);
            Ok(Err(Held {
                name: name.into(),
                pid: text.trim().parse().ok(),
            }))
        }
        Err((_, e)) => Err(lock_err(&path)(e.into())),
    }
}

/// Who holds account `name`, if another process does (its lock file is not
/// made when there is none).
fn holder(name: &str) -> Result<Option<Held>, SlotUserError> {
    if fs::symlink_metadata(lock_path(name)).is_err() {
        return Ok(None);
    }
    // A lock taken here is let go at once: the machine-wide lock keeps
    // the account free until it is claimed.
    Ok(try_lock(name)?.err())
}

/// The account `name`, if it exists.
pub fn lookup(name: &str) -> Result<Option<Account>, SlotUserError> {
    let user = User::from_name(name).map_err(|error| SlotUserError::Lookup {
        name: name.into(),
        error,
    })?;
    Ok(user.map(|u| Account {
        name: u.name,
        uid: u.uid.as_raw(),
        gid: u.gid.as_raw(),
    }))
}

fn make_account(name: &str) -> Result<(), SlotUserError> {
    tracing::info!(account = name, "creating a slot user for job isolation");
    let out = Command::new("useradd")
        .args(["--system", "--user-group", "--no-create-home"])
        .args(["--home-dir", "/nonexistent", "--shell", "/usr/sbin/nologin"])
        .args(["--comment", COMMENT])
        .arg(name)
        .output()
        .map_err(|e| SlotUserError::Create {
            name: name.into(),
            reason: format!("cannot run useradd: {e}"),
        })?;
    // An account made meanwhile by hand, or by a local RM of an earlier
    // version, which claimed without the machine-wide lock.
    if out.status.success() || lookup(name)?.is_some() {
        return Ok(());
    }
    Err(SlotUserError::Create {
        name: name.into(),
        reason: String::from_utf8_lossy(&out.stderr).trim().to_string(),
    })
}

/// SIGKILLs every process whose real or effective uid is `uid`.
pub fn kill_account(uid: u32) {
    let Ok(dir) = fs::read_dir("/proc") else {
        return;
    };
    for entry in dir.flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|s| s.parse::<libc::pid_t>().ok())
        else {
            continue;
        };
        let Ok(status) = fs::read_to_string(entry.path().join("status")) else {
            continue;
        };
        let runs_as = status
            .lines()
            .find_map(|l| l.strip_prefix("Uid:"))
            .map(|ids| {
                ids.split_whitespace()
                    .take(2)
                    .any(|id| id.parse() == Ok(uid))
            });
        if runs_as == Some(true) && pid > 1 {
            tracing::info!(pid, uid, "killing a process left running as a slot user");
            // SAFETY: kill has no memory effects.
            unsafe { libc::kill(pid, libc::SIGKILL) };
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn held_set(names: &[&str]) -> impl FnMut(&str) -> bool + use<> {
        let names: Vec<String> = names.iter().map(|n| n.to_string()).collect();
        move |n| names.iter().any(|h| h == n)
    }

    #[test]
    fn a_prefix_gives_one_name_per_slot_and_two_more() {
        assert_eq!(wanted(2), 4);
        assert_eq!(wanted(0), 2, "a submit machine still runs masters");
        let names = choose("s", wanted(2), held_set(&[])).unwrap();
        assert_eq!(names, ["s1", "s2", "s3", "s4"]);
    }

    #[test]
    fn a_second_local_rm_takes_the_next_free_names() {
        let first = choose("s", 4, held_set(&[])).unwrap();
        let held: Vec<&str> = first.iter().map(String::as_str).collect();
        let second = choose("s", 4, held_set(&held)).unwrap();
        assert_eq!(second, ["s5", "s6", "s7", "s8"]);
        // A name let go by a stopped local RM is taken again, before new ones.
        let third = choose("s", 3, held_set(&["s1", "s3", "s5", "s6"])).unwrap();
        assert_eq!(third, ["s2", "s4", "s7"]);
    }

    #[test]
    fn a_prefix_whose_names_are_all_held_gives_none() {
        let mut asked = 0;
        let r = choose("s", 2, |n| {
            asked += 1;
            n != "s9"
        });
        assert_eq!(r, Err(MAX_PREFIX_INDEX as usize - 1));
        assert_eq!(asked, MAX_PREFIX_INDEX);
        assert_eq!(choose("s", 0, |_| true), Ok(vec![]));
    }

    #[test]
    fn only_the_prefixs_own_names_are_its_accounts() {
        assert_eq!(prefix_index("carmi-slot", "carmi-slot7"), Some(7));
        assert_eq!(prefix_index("carmi-slot", "carmi-slot4096"), Some(4096));
        for other in [
            "carmi-slot",
            "carmi-slot0",
            "carmi-slot07",
            "carmi-slot4097",
            "carmi-slot-1",
            "carmi-slot1x",
            "carmi-slotx1",
            "carmi",
            "root",
        ] {
            assert_eq!(prefix_index("carmi-slot", other), None, "{other}");
        }
    }

    #[test]
    fn a_refusal_names_the_accounts_and_who_holds_them() {
        let e = SlotUserError::Held(vec![
            Held {
                name: "s1".into(),
                pid: Some(4242),
            },
            Held {
                name: "s2".into(),
                pid: None,
            },
        ]);
        let text = e.to_string();
        assert!(
            text.contains("`s1` (held by the local RM with pid 4242)"),
            "{text}"
        );
        assert!(text.contains("`s2` (held by another local RM"), "{text}");
        let e = SlotUserError::TooFew {
            listed: 1,
            want: 4,
            slots: 2,
        };
        assert!(e.to_string().contains("2 slot(s) need 4"), "{e}");
    }

    #[test]
    fn two_local_rms_never_hold_one_account() {
        if !nix::unistd::geteuid().is_root() {
            eprintln!("SKIP two_local_rms_never_hold_one_account: root not available");
            return;
        }
        let name = format!("carmi-test-claim-{}", std::process::id());
        assert_eq!(holder(&name).unwrap(), None, "no lock file: free");
        let first = try_lock(&name).unwrap().expect("free");
        let held = try_lock(&name).unwrap().expect_err("held by the first");
        assert_eq!(held.pid, Some(std::process::id()), "{held}");
        assert_eq!(holder(&name).unwrap(), Some(held));
        drop(first);
        assert_eq!(holder(&name).unwrap(), None, "given back");
        assert!(try_lock(&name).unwrap().is_ok());
        let _ = fs::remove_file(lock_path(&name));
    }
}
