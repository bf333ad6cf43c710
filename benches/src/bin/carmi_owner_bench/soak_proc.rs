//! What the soak reads from `/proc` and the pool's directory: the daemons'
//! pids, memory and descriptors, a local RM's child processes and their
//! states, processes a run left behind, and the logs'
//! warnings and errors.

use std::collections::BTreeMap;
use std::path::Path;

/// A daemon's resident memory (KiB) and open descriptors.
pub(super) fn footprint(pid: u32) -> Option<(u64, usize)> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let rss = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))?
        .trim()
        .trim_end_matches("kB")
        .trim()
        .parse()
        .ok()?;
    let fds = std::fs::read_dir(format!("/proc/{pid}/fd")).ok()?.count();
    Some((rss, fds))
}

/// Every process's pid and command-line arguments.
fn processes() -> Vec<(u32, Vec<String>)> {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    dir.flatten()
        .filter_map(|e| {
            let pid: u32 = e.file_name().to_string_lossy().parse().ok()?;
            let cmd = std::fs::read(e.path().join("cmdline")).ok()?;
            let args = cmd
                .split(|b| *b == 0)
                .filter(|a| !a.is_empty())
                .map(|a| String::from_utf8_lossy(a).into_owned())
                .collect();
            Some((pid, args))
        })
        .collect()
}

/// The pool's daemons under `dir`: the global RM's pid and each local RM's
/// pid by machine name (`--name`).
pub(super) fn daemons(dir: &Path) -> (Option<u32>, BTreeMap<String, u32>) {
    let dir = dir.to_string_lossy();
    let mut global = None;
    let mut locals = BTreeMap::new();
    for (pid, args) in processes() {
        let Some(prog) = args.first() else { continue };
        if !args.iter().any(|a| a.contains(&*dir)) {
            continue;
        }
        if prog.ends_with("carmi-global") {
            global = Some(pid);
        } else if prog.ends_with("carmi-local")
            && let Some(i) = args.iter().position(|a| a == "--name")
            && let Some(name) = args.get(i + 1)
        {
            locals.insert(name.clone(), pid);
        }
    }
    (global, locals)
}

/// The state letter of a process (`R`, `S`, `T`, `Z`...), `None` once gone.
pub(super) fn state(pid: u32) -> Option<char> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    stat.rsplit(')').next()?.trim_start().chars().next()
}

/// The children of `pid`, from every thread's `children` list (the local
/// RM spawns from whichever runtime thread runs the request).
pub(super) fn children(pid: u32) -> Vec<u32> {
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return Vec::new();
    };
    let mut out: Vec<u32> = tasks
        .flatten()
        .filter_map(|t| std::fs::read_to_string(t.path().join("children")).ok())
        .flat_map(|s| {
            s.split_whitespace()
                .filter_map(|p| p.parse().ok())
                .collect::<Vec<u32>>()
        })
        .collect();
    out.sort_unstable();
    out.dedup();
    out
}

/// Processes a finished run must not leave: any but this one and the
/// daemons that runs this executable (the WoDi server) or names the pool's
/// directory (workers run uploaded copies from the local RMs' work dirs).
pub(super) fn leftovers(dir: &Path, daemons: &[u32]) -> Vec<(u32, String)> {
    let me = std::process::id();
    let exe = std::env::current_exe().ok();
    let dir = dir.to_string_lossy();
    processes()
        .into_iter()
        .filter(|(pid, args)| {
            if *pid == me || daemons.contains(pid) {
                return false;
            }
            let runs_me = exe.is_some()
                && std::fs::read_link(format!("/proc/{pid}/exe")).ok() == exe
                && state(*pid) != Some('Z');
            runs_me || args.iter().any(|a| a.contains(&*dir))
        })
        .map(|(pid, args)| (pid, args.join(" ")))
        .collect()
}

/// The `WARN` and `ERROR` lines of the logs `names` (`NAME.log` in `dir`),
/// counted by kind: the level and message with digits blanked, so that the
/// same complaint about another host or connection counts once.
pub(super) fn complaints(dir: &Path, names: &[String]) -> BTreeMap<String, usize> {
    let mut out = BTreeMap::new();
    for n in names {
        let text = std::fs::read_to_string(dir.join(format!("{n}.log"))).unwrap_or_default();
        for line in text.lines() {
            let Some(at) = line.find(" WARN ").or_else(|| line.find(" ERROR ")) else {
                continue;
            };
            let kind: String = line[at..]
                .chars()
                .map(|c| if c.is_ascii_digit() { '#' } else { c })
                .take(160)
                .collect();
            *out.entry(format!(
                "{}: {}",
                n.trim_end_matches(char::is_numeric),
                kind.trim()
            ))
            .or_insert(0) += 1;
        }
    }
    out
}

/// The lines of the logs `names` (`NAME.log` in `dir`) that contain `needle`.
pub(super) fn count_lines(dir: &Path, names: &[String], needle: &str) -> usize {
    names
        .iter()
        .map(|n| {
            std::fs::read_to_string(dir.join(format!("{n}.log")))
                .unwrap_or_default()
                .lines()
                .filter(|l| l.contains(needle))
                .count()
        })
        .sum()
}
