//! Where the owner's activity comes from: a real machine's keyboard, mouse
//! and load, or a simulated owner driven by owner events ([`SimulatedOwner`],
//! pure, in `carmi-local-core`).
//!
//! Real measurement, as HTCondor does it: the keyboard idle time is the time
//! since the most recent access of any terminal (`/dev/tty*`, `/dev/pts/*`)
//! or input device (`/dev/input/*`); with none found, the machine counts as
//! idle since boot. The non-pool load is the one-minute load average minus
//! the CPU share our job processes used since the last measurement (their
//! group leaders' `utime + stime`), floor 0.

use std::collections::HashMap;
use std::path::Path;
use std::time::SystemTime;

pub use carmi_local_core::owner::{SIMULATED_INITIAL_IDLE, SimulatedOwner};

use crate::policy::Observation;

/// Measures the real owner of this machine.
#[derive(Debug, Default)]
pub struct RealOwner {
    /// CPU ticks (its own and its reaped children's) of each process of our
    /// job groups at the last measurement, by pid.
    last_ticks: HashMap<i32, u64>,
    /// The job groups watched at the last measurement.
    last_groups: std::collections::HashSet<i32>,
    /// When the last measurement was taken (policy time).
    last_at: Option<f64>,
    /// CPUs our job processes used between the last two measurements.
    last_share: f64,
}

impl RealOwner {
    /// CPUs the job processes used between the last two measurements: what
    /// [`RealOwner::measure`] takes off the load to get the owner's.
    pub fn job_cpus(&self) -> f64 {
        self.last_share
    }

    /// Measures now (`now` is policy time); `job_pids` are the group leaders
    /// of our job processes. The job's load is the CPU of every process in
    /// their groups, children included (the shell commands a worker runs),
    /// so that a job never counts as its owner's load and suspends itself.
    pub fn measure(&mut self, now: f64, job_pids: &[i32]) -> Observation {
        let keyboard_idle = keyboard_idle_seconds(SystemTime::now());
        let load_avg = std::fs::read_to_string("/proc/loadavg")
            .ok()
            .and_then(|t| t.split_whitespace().next()?.parse::<f64>().ok())
            .filter(|l| l.is_finite())
            .unwrap_or(0.0);
        let groups: std::collections::HashSet<i32> = job_pids.iter().copied().collect();
        let mut ticks = HashMap::with_capacity(job_pids.len());
        let mut used = 0u64;
        for (pid, pgrp, t) in group_members(&groups) {
            // A process first seen in a group watched last time was born
            // since: all its time is new. In a new group, only what follows.
            let before = match self.last_ticks.get(&pid) {
                Some(&b) => b,
                None if self.last_groups.contains(&pgrp) => 0,
                None => t,
            };
            used += t.saturating_sub(before);
            ticks.insert(pid, t);
        }
        self.last_groups = groups;
        let share = match self.last_at {
            Some(then) if now > then => used as f64 / ticks_per_second() / (now - then),
            _ => 0.0,
        };
        self.last_ticks = ticks;
        self.last_at = Some(now);
        self.last_share = share;
        Observation {
            keyboard_idle,
            load_avg,
            non_pool_load: (load_avg - share).max(0.0),
        }
    }
}

/// Seconds since the most recent access of a terminal or input device at `now`.
pub fn keyboard_idle_seconds(now: SystemTime) -> f64 {
    let mut latest: Option<SystemTime> = None;
    let mut consider = |path: &Path| {
        if let Ok(atime) = std::fs::metadata(path).and_then(|m| m.accessed()) {
            latest = Some(latest.map_or(atime, |l| l.max(atime)));
        }
    };
    if let Ok(dir) = std::fs::read_dir("/dev") {
        for e in dir.flatten() {
            if e.file_name().as_encoded_bytes().starts_with(b"tty") {
                consider(&e.path());
            }
        }
    }
    for sub in ["/dev/pts", "/dev/input"] {
        if let Ok(dir) = std::fs::read_dir(sub) {
            for e in dir.flatten() {
                // `ptmx` is the multiplexer every new terminal touches, not a keyboard.
                if e.file_name() != "ptmx" {
                    consider(&e.path());
                }
            }
        }
    }
    match latest {
        Some(t) => now.duration_since(t).map_or(0.0, |d| d.as_secs_f64()),
        None => uptime_seconds(),
    }
}

/// Seconds since boot, from /proc/uptime (0 if unreadable).
fn uptime_seconds() -> f64 {
    std::fs::read_to_string("/proc/uptime")
        .ok()
        .and_then(|t| t.split_whitespace().next()?.parse().ok())
        .unwrap_or(0.0)
}

/// Every live process whose process group is one of `groups`: its pid, group
/// and CPU ticks (its own and its reaped children's), from one scan of /proc.
fn group_members(groups: &std::collections::HashSet<i32>) -> Vec<(i32, i32, u64)> {
    let mut out = Vec::new();
    if groups.is_empty() {
        return out;
    }
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return out;
    };
    for entry in dir.flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|n| n.parse::<i32>().ok())
        else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
            continue;
        };
        if let Some((pgrp, own, children)) = parse_stat(&stat)
            && groups.contains(&pgrp)
        {
            out.push((pid, pgrp, own + children));
        }
    }
    out
}

/// The process group, `utime + stime` and `cutime + cstime` from the text of
/// /proc/PID/stat (fields 5, 14-15 and 16-17).
fn parse_stat(stat: &str) -> Option<(i32, u64, u64)> {
    let rest = &stat[stat.rfind(')')? + 1..];
    let f: Vec<&str> = rest.split_whitespace().take(15).collect();
    let num = |i: usize| f.get(i)?.parse::<u64>().ok();
    let pgrp = f.get(2)?.parse::<i32>().ok()?;
    Some((pgrp, num(11)? + num(12)?, num(13)? + num(14)?))
}

/// `utime + stime` of a process in clock ticks, from /proc/PID/stat.
#[cfg(test)]
fn cpu_ticks(pid: i32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    parse_stat_ticks(&stat)
}

/// `utime + stime` from the text of /proc/PID/stat (fields 14 and 15; the
/// command name in parentheses may contain spaces).
pub fn parse_stat_ticks(stat: &str) -> Option<u64> {
    let rest = &stat[stat.rfind(')')? + 1..];
    let mut f = rest.split_whitespace();
    // After the command: state is field 3, so utime (14) is the 12th here.
    let utime: u64 = f.nth(11)?.parse().ok()?;
    let stime: u64 = f.next()?.parse().ok()?;
    Some(utime + stime)
}

/// Clock ticks per second, the unit of /proc/PID/stat CPU times.
pub fn ticks_per_second() -> f64 {
    // SAFETY: sysconf has no memory effects.
    let t = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    if t > 0 { t as f64 } else { 100.0 }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stat_parsing_skips_a_command_with_spaces() {
        let stat = "42 (a (b) c) S 1 42 42 0 -1 4194304 100 0 0 0 7 3 0 0 20 0 1 0 5 0 0";
        assert_eq!(parse_stat_ticks(stat), Some(10));
        assert_eq!(parse_stat_ticks("garbage"), None);
        let own = cpu_ticks(std::process::id() as i32);
        assert!(own.is_some());
    }

    #[test]
    fn a_jobs_busy_children_count_as_the_jobs_load() {
        use std::os::unix::process::CommandExt;
        // The group's leader only waits; its two children spin, as the shell
        // commands of a worker do.
        let mut leader = std::process::Command::new("sh")
            .args([
                "-c",
                "sh -c 'while :; do :; done' & sh -c 'while :; do :; done' & wait",
            ])
            .process_group(0)
            .spawn()
            .unwrap();
        let pgid = leader.id() as i32;
        let mut r = RealOwner::default();
        let start = std::time::Instant::now();
        r.measure(0.0, &[pgid]);
        std::thread::sleep(std::time::Duration::from_millis(800));
        let o = r.measure(start.elapsed().as_secs_f64(), &[pgid]);
        let leader_only = cpu_ticks(pgid).unwrap_or(0) as f64 / ticks_per_second();
        // SAFETY: a signal to the test's own process group.
        unsafe { libc::kill(-pgid, libc::SIGKILL) };
        let _ = leader.wait();
        // Two spinning children: well above a tenth of a CPU even on a
        // loaded machine; the leader alone used next to nothing.
        assert!(
            r.job_cpus() > 0.1,
            "the children's CPU was not counted: {}",
            r.job_cpus()
        );
        assert!(leader_only < 0.05, "{leader_only}");
        assert!(o.non_pool_load <= o.load_avg, "{o:?}");
    }

    #[test]
    fn stat_fields_of_group_and_children() {
        let stat = "42 (a (b) c) S 1 40 40 0 -1 4194304 100 0 0 0 7 3 5 6 20 0 1 0 5 0 0";
        assert_eq!(parse_stat(stat), Some((40, 10, 11)));
        assert_eq!(parse_stat("7 (x) S 1"), None);
    }

    #[test]
    fn real_measurement_gives_plausible_values() {
        let mut r = RealOwner::default();
        let me = std::process::id() as i32;
        let a = r.measure(0.0, &[me]);
        let b = r.measure(1.0, &[me]);
        for o in [a, b] {
            assert!(o.keyboard_idle >= 0.0 && o.load_avg >= 0.0, "{o:?}");
            assert!(
                o.non_pool_load >= 0.0 && o.non_pool_load <= o.load_avg,
                "{o:?}"
            );
        }
    }
}
