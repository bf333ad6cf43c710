//! Clean-up after pools whose owning process died without shutting down
//! (SIGKILL, a crash): their folders, and job processes still running in
//! them.
//!
//! Every pool folder holds `owner.pid`, the process that runs the pool. A
//! folder whose owner is gone is stale: processes whose working directory
//! lies inside it (job processes run in sandboxes there) get SIGKILL, and
//! the folder is removed. A folder without the file, or whose owner lives,
//! is left alone; a reused pid errs on the safe side (the folder stays).

use std::path::Path;

/// File in a pool folder naming the process that runs the pool.
pub const OWNER_FILE: &str = "owner.pid";
/// Prefix of pool folder names.
pub const DIR_PREFIX: &str = "carmi-pool-";

/// Writes `owner.pid` for this process into `dir`.
pub fn claim(dir: &Path) -> std::io::Result<()> {
    std::fs::write(dir.join(OWNER_FILE), format!("{}\n", std::process::id()))
}

/// True while `pid` exists and is not a zombie.
pub fn alive(pid: i32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => !stat
            .rsplit_once(')')
            .is_some_and(|(_, rest)| rest.trim_start().starts_with('Z')),
        Err(_) => false,
    }
}

/// Removes the stale pool folders directly under `base`; returns how many.
pub fn sweep_stale(base: &Path) -> usize {
    let Ok(entries) = std::fs::read_dir(base) else {
        return 0;
    };
    let mut removed = 0;
    for e in entries.flatten() {
        let dir = e.path();
        if !e.file_name().to_string_lossy().starts_with(DIR_PREFIX) || !dir.is_dir() {
            continue;
        }
        let owner = std::fs::read_to_string(dir.join(OWNER_FILE))
            .ok()
            .and_then(|s| s.trim().parse::<i32>().ok());
        match owner {
            Some(pid) if !alive(pid) => {
                let killed = kill_processes_in(&dir);
                match std::fs::remove_dir_all(&dir) {
                    Ok(()) => {
                        tracing::info!(dir = %dir.display(), owner = pid, killed, "removed a stale pool folder");
                        removed += 1;
                    }
                    Err(error) => {
                        tracing::warn!(dir = %dir.display(), %error, "cannot remove a stale pool folder");
                    }
                }
            }
            _ => {}
        }
    }
    removed
}

/// SIGKILLs the process group of every process whose working directory is
/// inside `dir`; returns how many processes were found.
fn kill_processes_in(dir: &Path) -> usize {
    let Ok(procs) = std::fs::read_dir("/proc") else {
        return 0;
    };
    let mut found = 0;
    for p in procs.flatten() {
        let Some(pid) = p.file_name().to_str().and_then(|n| n.parse::<i32>().ok()) else {
            continue;
        };
        let Ok(cwd) = std::fs::read_link(p.path().join("cwd")) else {
            continue;
        };
        if cwd.starts_with(dir) {
            found += 1;
            // SAFETY: plain signal sends. Job processes lead their own
            // process group, so the group takes their children too.
            unsafe {
                let pgid = libc::getpgid(pid);
                if pgid > 1 && pgid != libc::getpgrp() {
                    libc::kill(-pgid, libc::SIGKILL);
                }
                libc::kill(pid, libc::SIGKILL);
            }
        }
    }
    found
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::process::Command;

    #[test]
    fn a_folder_whose_owner_died_goes_with_its_processes() {
        let base = std::env::temp_dir().join(format!("owner-sim-sweep-{}", std::process::id()));
        let stale = base.join(format!("{DIR_PREFIX}stale"));
        let live = base.join(format!("{DIR_PREFIX}live"));
        let unowned = base.join(format!("{DIR_PREFIX}unowned"));
        for d in [&stale, &live, &unowned] {
            std::fs::create_dir_all(d.join("sandbox")).unwrap();
        }
        // A pid that certainly is dead: a child that exited and was reaped.
        let mut dead = Command::new("true").spawn().unwrap();
        let dead_pid = dead.id();
        dead.wait().unwrap();
        std::fs::write(stale.join(OWNER_FILE), format!("{dead_pid}\n")).unwrap();
        claim(&live).unwrap();
        let mut orphan = {
            use std::os::unix::process::CommandExt;
            let mut c = Command::new("sleep");
            c.arg("300")
                .current_dir(stale.join("sandbox"))
                .process_group(0);
            c.spawn().unwrap()
        };
        assert_eq!(sweep_stale(&base), 1);
        assert!(!stale.exists());
        assert!(live.exists() && unowned.exists());
        // Killed (the wait reaps it, so it does not linger as a zombie).
        let status = orphan.wait().unwrap();
        assert!(!status.success());
        std::fs::remove_dir_all(&base).unwrap();
    }
}
