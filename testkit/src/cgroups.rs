//! Test hygiene: the cgroups a test's local RMs left behind. A local RM
//! removes its own when it stops; one a test SIGKILLed and never started
//! again leaves its parent cgroup (and whatever its jobs started) for its
//! next start, which never comes once the test's directory is gone. The
//! pool sweeps them when dropped, from the paths the local RMs logged.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

impl crate::Pool {
    /// Sweeps what the pool's local RMs left in their cgroups (those
    /// stopped cleanly left nothing).
    pub(crate) fn sweep_cgroups(&self) {
        for l in &self.locals {
            let log = std::fs::read_to_string(self.dir.join(format!("{}.log", l.name)));
            for parent in parents_in_log(&log.unwrap_or_default()) {
                sweep(&parent);
            }
        }
    }
}

/// The parent cgroups (`.../carmi-local.NAME.HASH`) named in `log`.
pub fn parents_in_log(log: &str) -> Vec<PathBuf> {
    let mut found: Vec<PathBuf> = log
        .split(|c: char| c.is_whitespace() || c == '"' || c == '=')
        .filter(|w| w.starts_with("/sys/fs/cgroup/"))
        .map(PathBuf::from)
        .filter(|p| {
            p.file_name()
                .is_some_and(|n| n.to_string_lossy().starts_with("carmi-local."))
        })
        .collect();
    found.sort();
    found.dedup();
    found
}

/// Kills every process in `parent`'s cgroups and removes them and it; a
/// parent that is gone already is no error.
pub fn sweep(parent: &Path) {
    let Ok(entries) = std::fs::read_dir(parent) else {
        return;
    };
    for entry in entries.flatten() {
        if entry.file_type().is_ok_and(|t| t.is_dir()) {
            empty_and_remove(&entry.path());
        }
    }
    empty_and_remove(parent);
}

fn empty_and_remove(dir: &Path) {
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let procs = std::fs::read_to_string(dir.join("cgroup.procs")).unwrap_or_default();
        for pid in procs.lines().filter_map(|l| l.trim().parse::<i32>().ok()) {
            if pid > 1 {
                // SAFETY: kill has no memory effects.
                unsafe { libc::kill(pid, libc::SIGKILL) };
            }
        }
        if std::fs::remove_dir(dir).is_ok() || !dir.exists() || Instant::now() > deadline {
            return;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parents_are_read_from_a_local_rms_log() {
        let log = "INFO each process runs in a cgroup of its own version=1 \
                   parent=/sys/fs/cgroup/memory/x/carmi-local.m0.0a1b2c3d \
                   cpu_parent=/sys/fs/cgroup/cpu/carmi-local.m0.0a1b2c3d\n\
                   INFO removed path=/sys/fs/cgroup/memory/x/carmi-local.m0.0a1b2c3d/p3\n";
        assert_eq!(
            parents_in_log(log),
            [
                PathBuf::from("/sys/fs/cgroup/cpu/carmi-local.m0.0a1b2c3d"),
                PathBuf::from("/sys/fs/cgroup/memory/x/carmi-local.m0.0a1b2c3d"),
            ]
        );
    }
}
