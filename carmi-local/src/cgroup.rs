//! Cgroups: each process group the local RM starts runs in a cgroup of its
//! own, which binds it to its job's requests (a hard memory limit at
//! `request_memory`, a CPU weight by `request_cpus`: the values are decided
//! in `carmi_local_core::binding`), measures its peak memory, and holds
//! every process it starts, `setsid` or not, so that all of them are found,
//! signalled and killed with it.
//!
//! Version 2 is used where its memory controller is available (a pure v2
//! host: `/sys/fs/cgroup`); else the v1 memory controller (and the v1 `cpu`
//! controller for the weight, when mounted), as on hybrid hosts whose
//! cgroup2 mount has no controllers. Where neither can be written (not
//! root, nothing mounted), the daemon says so once and runs processes
//! unbound (`MemoryLimitEnforced = false` in its ad).
//!
//! Layout: a parent cgroup per local RM, `carmi-local.NAME.HASH` (its name
//! and a hash of its work directory, so that two local RMs on one machine
//! never share one), holding one cgroup per process, `pID`. On v2 the parent
//! is under the daemon's own cgroup when that is delegated to it (a systemd
//! unit with `Delegate=yes`, the daemon alone in it: it moves itself into a
//! leaf, `carmi-local.NAME.HASH.daemon`, since a cgroup with processes
//! cannot give its controllers to children), else at the top of the
//! hierarchy; on v1 it is under the daemon's own cgroup of each controller,
//! inside whatever limits the daemon itself runs under. A parent left by a killed daemon is
//! emptied (everything in it killed, after the sweep of its recorded
//! process groups: [`crate::spawn::Launcher::kill_leftovers`]) and reused at
//! start; a stopped daemon removes its own.
//!
//! A process enters its cgroup in the child between `fork` and `exec`: the
//! daemon opens the cgroup's `cgroup.procs` first, and the child writes `0`
//! (itself) to it, so nothing of the job ever runs outside. The kernel
//! checks that write with the credentials of whoever opened the file (the
//! daemon, as root), so it succeeds after the child switched to a slot user.

use std::collections::HashMap;
use std::fs;
use std::io::{self, Write};
use std::os::fd::{AsRawFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use carmi_api::ids::ProcessId;
use carmi_api::msg::{ProcessUsage, Requests};
use carmi_local_core::binding::{Counters, Limits};

/// How often live cgroups are checked for an OOM kill that left the
/// process's leader alive (a child was killed, the leader would run on).
const WATCH_PERIOD: Duration = Duration::from_millis(500);
/// How long killing everything in a cgroup may take before giving up.
const KILL_PATIENCE: Duration = Duration::from_secs(5);

/// Which cgroup hierarchy binds the processes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Version {
    /// The v1 memory controller (and v1 `cpu`, when mounted).
    V1,
    /// The unified hierarchy with its memory controller.
    V2,
}

/// The local RM's parent cgroup(s) and the processes' cgroups under them.
/// Clones share the same parent and watch list.
#[derive(Clone, Debug)]
pub struct Cgroups {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    version: Version,
    /// v2: the parent; v1: the memory controller's parent.
    memory: PathBuf,
    /// v1 only: the `cpu` controller's parent, when mounted and writable.
    cpu: Option<PathBuf>,
    /// Cgroups of live processes, checked for OOM kills by the watcher.
    watched: Mutex<HashMap<ProcessId, ProcessCgroup>>,
}

impl Drop for Inner {
    fn drop(&mut self) {
        self.remove_parents();
    }
}

impl Inner {
    fn remove_parents(&self) {
        // Empty once every process was reaped; else a restart cleans it.
        for dir in std::iter::once(&self.memory).chain(self.cpu.as_ref()) {
            match fs::remove_dir(dir) {
                Err(e) if e.kind() != io::ErrorKind::NotFound => {
                    tracing::warn!(path = %dir.display(), error = %e, "this local RM's cgroup is not removed; its next start empties it");
                }
                _ => {}
            }
        }
    }
}

/// One process's cgroup.
#[derive(Clone, Debug)]
pub struct ProcessCgroup {
    version: Version,
    memory: PathBuf,
    cpu: Option<PathBuf>,
}

/// A mounted cgroup hierarchy: its mount point, type and super options.
struct Mount {
    point: PathBuf,
    fstype: String,
    options: Vec<String>,
}

/// [`Cgroups::set_up`] at the daemon's start (unless `enabled` is false:
/// the `cgroups = false` setting), saying once what it found: which
/// version binds processes, or (a warning) why they run unbound.
pub fn start(name: &str, work_dir: &Path, enabled: bool) -> Option<Cgroups> {
    if !enabled {
        tracing::warn!(
            "cgroups = false: processes run unbound; request_memory is matched against machines but not enforced (MemoryLimitEnforced = false)"
        );
        return None;
    }
    match Cgroups::set_up(name, work_dir) {
        Ok(c) => {
            let cpu = c.inner.cpu.as_ref().map(|p| p.display().to_string());
            tracing::info!(version = c.version(), parent = %c.parent().display(), cpu_parent = cpu.unwrap_or_default(), "each process runs in a cgroup of its own, bound to its job's request_memory and request_cpus");
            Some(c)
        }
        Err(why) => {
            tracing::warn!(
                "no usable cgroup ({why}): processes run unbound; request_memory is matched against machines but not enforced, and a process that leaves its session outlives its job (MemoryLimitEnforced = false)"
            );
            None
        }
    }
}

impl Cgroups {
    /// Finds a usable hierarchy, makes (or empties) this local RM's parent
    /// cgroup in it, and starts the OOM watcher; `Err` says why processes
    /// will run unbound.
    pub fn set_up(name: &str, work_dir: &Path) -> Result<Cgroups, String> {
        let dir_name = parent_name(name, work_dir);
        let mounts = mounts()?;
        let inner = match mounts.iter().find(|m| m.fstype == "cgroup2") {
            Some(m) if has_memory_controller(&m.point) => set_up_v2(&m.point, &dir_name)?,
            _ => set_up_v1(&mounts, &dir_name)?,
        };
        let cgroups = Cgroups {
            inner: Arc::new(inner),
        };
        let weak = Arc::downgrade(&cgroups.inner);
        std::thread::Builder::new()
            .name("carmi-oom-watch".into())
            .spawn(move || watch(weak))
            .map_err(|e| format!("cannot start the OOM watcher thread: {e}"))?;
        Ok(cgroups)
    }

    /// Kills what an earlier run of this local RM left in its cgroups (it
    /// was killed before it could) and removes them. Call before the first
    /// process starts.
    pub fn kill_leftovers(&self) {
        let inner = &self.inner;
        for parent in std::iter::once(&inner.memory).chain(inner.cpu.as_ref()) {
            clean_stale(parent, inner.version);
        }
    }

    /// Removes the parent cgroups, empty once every process was reaped
    /// (the daemon stopping); one still busy stays, and is said.
    pub fn remove_parents(&self) {
        self.inner.remove_parents();
    }

    /// 1 or 2.
    pub fn version(&self) -> u8 {
        match self.inner.version {
            Version::V1 => 1,
            Version::V2 => 2,
        }
    }

    /// Where this local RM's process cgroups are (the memory controller's, on v1).
    pub fn parent(&self) -> &Path {
        &self.inner.memory
    }

    /// Makes the cgroup of `process` with `limits`; one left over with the
    /// same name (from a killed run) is emptied and made again.
    pub fn create(&self, process: ProcessId, limits: &Limits) -> io::Result<ProcessCgroup> {
        let leaf = format!("p{}", process.0);
        let cg = ProcessCgroup {
            version: self.inner.version,
            memory: self.inner.memory.join(&leaf),
            cpu: self.inner.cpu.as_ref().map(|c| c.join(&leaf)),
        };
        if cg.dirs().any(|d| d.exists()) {
            cg.kill_all();
            cg.remove();
        }
        for dir in cg.dirs() {
            fs::create_dir(dir).map_err(|e| context(e, dir))?;
        }
        if let Err(e) = cg.set_limits(limits) {
            cg.remove();
            return Err(e);
        }
        Ok(cg)
    }

    /// Makes the cgroup of `process`, bound to its job's `requests`, and
    /// watches it for OOM kills until [`Cgroups::finish`].
    pub fn bind(&self, process: ProcessId, requests: &Requests) -> io::Result<ProcessCgroup> {
        let cg = self.create(process, &carmi_local_core::binding::limits(requests))?;
        lock(&self.inner.watched).insert(process, cg.clone());
        Ok(cg)
    }

    /// The process's leader exited: kills what is left in its cgroup, reads
    /// what it used (over its `requests` or not) and removes the cgroup.
    pub fn finish(
        &self,
        process: ProcessId,
        cg: &ProcessCgroup,
        requests: &Requests,
    ) -> ProcessUsage {
        lock(&self.inner.watched).remove(&process);
        let left = cg.pids().len();
        if left > 0 {
            tracing::info!(%process, left, "killing what the process left in its cgroup");
        }
        cg.kill_all();
        let usage = carmi_local_core::binding::usage(&cg.counters(), requests);
        cg.remove();
        if let Some(request) = usage.memory_exceeded_mib {
            tracing::warn!(%process, peak_mib = usage.memory_peak_mib(), request_mib = request, "the process went over its request_memory");
        }
        usage
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// Kills the whole cgroup of a process whose limit made the kernel kill one
/// of its processes: HTCondor stops the whole job, not the biggest process
/// alone, and its leader then exits and reports.
fn watch(inner: std::sync::Weak<Inner>) {
    loop {
        std::thread::sleep(WATCH_PERIOD);
        let Some(inner) = inner.upgrade() else {
            return;
        };
        let over: Vec<(ProcessId, ProcessCgroup)> = lock(&inner.watched)
            .iter()
            .filter(|(_, cg)| cg.counters().oom_kills > 0)
            .map(|(p, cg)| (*p, cg.clone()))
            .collect();
        for (process, cg) in over {
            tracing::warn!(%process, "a process went over its memory limit and the kernel killed it; killing the rest of its cgroup");
            lock(&inner.watched).remove(&process);
            cg.kill_all();
        }
    }
}

impl ProcessCgroup {
    fn dirs(&self) -> impl Iterator<Item = &PathBuf> {
        std::iter::once(&self.memory).chain(self.cpu.as_ref())
    }

    fn set_limits(&self, limits: &Limits) -> io::Result<()> {
        let m = &self.memory;
        match self.version {
            Version::V2 => {
                if let Some(bytes) = limits.memory_bytes {
                    write(m, "memory.max", &bytes.to_string())?;
                    // Over its limit a job must stop, not page out to swap.
                    optional(write(m, "memory.swap.max", "0"));
                    // The whole job goes at an OOM kill, not its biggest process.
                    optional(write(m, "memory.oom.group", "1"));
                }
                if let Some(w) = limits.cpu_weight {
                    write(m, "cpu.weight", &w.to_string())?;
                }
            }
            Version::V1 => {
                if let Some(bytes) = limits.memory_bytes {
                    write(m, "memory.limit_in_bytes", &bytes.to_string())?;
                    // Present with swap accounting only; set after the limit.
                    optional(write(m, "memory.memsw.limit_in_bytes", &bytes.to_string()));
                }
                if let (Some(cpu), Some(shares)) = (&self.cpu, limits.cpu_shares) {
                    write(cpu, "cpu.shares", &shares.to_string())?;
                }
            }
        }
        Ok(())
    }

    /// The `cgroup.procs` files, opened for the child to enter them between
    /// `fork` and `exec` (see the module's doc).
    pub fn entry_files(&self) -> io::Result<Vec<OwnedFd>> {
        self.dirs()
            .map(|d| {
                let path = d.join("cgroup.procs");
                fs::OpenOptions::new()
                    .write(true)
                    .open(&path)
                    .map(OwnedFd::from)
                    .map_err(|e| context(e, &path))
            })
            .collect()
    }

    /// The processes in it now.
    pub fn pids(&self) -> Vec<i32> {
        fs::read_to_string(self.memory.join("cgroup.procs"))
            .unwrap_or_default()
            .lines()
            .filter_map(|l| l.trim().parse().ok())
            .filter(|&p| p > 1)
            .collect()
    }

    /// Sends `sig` to every process in it; true if one got it.
    pub fn signal_all(&self, sig: i32) -> bool {
        let mut any = false;
        for pid in self.pids() {
            // SAFETY: kill has no memory effects; `pid` is positive.
            any |= unsafe { libc::kill(pid, sig) } == 0;
        }
        any
    }

    /// Kills everything in it (`cgroup.kill` on v2; SIGKILL to each process
    /// until none is left on v1, where one may fork while it is listed) and
    /// waits until it is empty; true when it is.
    pub fn kill_all(&self) -> bool {
        if self.version == Version::V2 {
            optional(write(&self.memory, "cgroup.kill", "1"));
        }
        let deadline = Instant::now() + KILL_PATIENCE;
        let mut pause = Duration::from_millis(1);
        loop {
            let pids = self.pids();
            if pids.is_empty() {
                return true;
            }
            if Instant::now() > deadline {
                tracing::warn!(path = %self.memory.display(), ?pids, "processes of a cgroup survive SIGKILL");
                return false;
            }
            for pid in pids {
                // SAFETY: as in `signal_all`.
                unsafe { libc::kill(pid, libc::SIGKILL) };
            }
            std::thread::sleep(pause);
            pause = (pause * 2).min(Duration::from_millis(50));
        }
    }

    /// Its peak memory and OOM kills so far.
    pub fn counters(&self) -> Counters {
        let m = &self.memory;
        let (peak, events) = match self.version {
            Version::V2 => ("memory.peak", "memory.events"),
            Version::V1 => ("memory.max_usage_in_bytes", "memory.oom_control"),
        };
        let peak_bytes = fs::read_to_string(m.join(peak))
            .ok()
            .and_then(|t| t.trim().parse().ok())
            .unwrap_or(0);
        let oom_kills = fs::read_to_string(m.join(events))
            .ok()
            .and_then(|t| keyed(&t, "oom_kill"))
            .unwrap_or(0);
        Counters {
            peak_bytes,
            oom_kills,
        }
    }

    /// Removes it (everything in it must be gone: see [`Self::kill_all`]).
    pub fn remove(&self) {
        for dir in self.dirs() {
            // A cgroup whose last process is still being torn down is busy a moment.
            let mut tries = 0;
            while let Err(e) = fs::remove_dir(dir) {
                if e.kind() == io::ErrorKind::NotFound {
                    break;
                }
                tries += 1;
                if tries > 50 {
                    tracing::warn!(path = %dir.display(), error = %e, "cannot remove a process's cgroup");
                    break;
                }
                std::thread::sleep(Duration::from_millis(20));
            }
        }
    }
}

/// Writes `0` (the calling process) to each of `files`: called in the child
/// between `fork` and `exec`, so it only makes async-signal-safe calls and
/// allocates nothing.
pub fn enter(files: &[i32]) -> io::Result<()> {
    for &fd in files {
        // SAFETY: `fd` is an open descriptor the parent keeps open until
        // the spawn returned; the buffer is a static byte.
        if unsafe { libc::write(fd, b"0".as_ptr().cast(), 1) } != 1 {
            return Err(io::Error::last_os_error());
        }
    }
    Ok(())
}

/// The raw descriptors of `files`, for [`enter`].
pub fn raw(files: &[OwnedFd]) -> Vec<i32> {
    files.iter().map(AsRawFd::as_raw_fd).collect()
}

fn set_up_v2(mount: &Path, dir_name: &str) -> Result<Inner, String> {
    let controllers = read_words(&mount.join("cgroup.controllers"));
    let wanted: Vec<&str> = ["memory", "cpu"]
        .into_iter()
        .filter(|c| controllers.iter().any(|h| h == c))
        .collect();
    let base = delegated(mount, dir_name).unwrap_or_else(|| mount.to_path_buf());
    // The top gives its controllers to children already under systemd; a
    // delegated cgroup gives them once the daemon left it for its leaf.
    for c in &wanted {
        let given = write(&base, "cgroup.subtree_control", &format!("+{c}"));
        if base != mount {
            given.map_err(|e| {
                format!(
                    "cannot enable the {c} controller in {}: {e}",
                    base.display()
                )
            })?;
        } else {
            optional(given);
        }
    }
    let parent = base.join(dir_name);
    make_dir(&parent)?;
    for c in &wanted {
        write(&parent, "cgroup.subtree_control", &format!("+{c}")).map_err(|e| {
            format!("cannot enable the {c} controller for this local RM's cgroups: {e}")
        })?;
    }
    Ok(Inner {
        version: Version::V2,
        memory: parent,
        cpu: None,
        watched: Mutex::new(HashMap::new()),
    })
}

/// The daemon's own v2 cgroup when it is delegated to it (a systemd unit
/// with `Delegate=yes`: the daemon alone in it), after moving the daemon
/// into a leaf of it, `DIR.daemon` (a cgroup with processes cannot give its
/// controllers to children): the jobs' cgroups then sit inside the unit's,
/// and systemd kills them with it. `None` (the top of the hierarchy is used)
/// when the daemon shares its cgroup with other processes, which are not
/// its to move.
fn delegated(mount: &Path, dir_name: &str) -> Option<PathBuf> {
    let own = fs::read_to_string("/proc/self/cgroup").ok()?;
    let path = own_path(&own, "")?.trim_start_matches('/').to_string();
    if path.is_empty() {
        return None;
    }
    let base = mount.join(path);
    let me = std::process::id();
    let procs = fs::read_to_string(base.join("cgroup.procs")).ok()?;
    let alone = procs.split_whitespace().collect::<Vec<_>>() == [me.to_string().as_str()];
    if !alone {
        return None;
    }
    let leaf = base.join(format!("{dir_name}.daemon"));
    make_dir(&leaf).ok()?;
    // All of the daemon's threads move with it.
    match write(&leaf, "cgroup.procs", &me.to_string()) {
        Ok(()) => Some(base),
        Err(e) => {
            tracing::debug!(error = %e, "cannot move into a leaf of the own cgroup");
            None
        }
    }
}

fn set_up_v1(mounts: &[Mount], dir_name: &str) -> Result<Inner, String> {
    let own = fs::read_to_string("/proc/self/cgroup")
        .map_err(|e| format!("cannot read /proc/self/cgroup: {e}"))?;
    let under = |controller: &str| -> Option<PathBuf> {
        let mount = mounts
            .iter()
            .find(|m| m.fstype == "cgroup" && m.options.iter().any(|o| o == controller))?;
        let path = own_path(&own, controller)?;
        Some(
            mount
                .point
                .join(path.trim_start_matches('/'))
                .join(dir_name),
        )
    };
    let memory = under("memory").ok_or(
        "no cgroup memory controller is mounted (neither a cgroup2 hierarchy with its memory \
         controller nor a cgroup v1 memory hierarchy)",
    )?;
    make_dir(&memory)?;
    let cpu = under("cpu").and_then(|dir| match make_dir(&dir) {
        Ok(()) => Some(dir),
        Err(e) => {
            tracing::warn!("{e}; request_cpus will not weigh CPU time");
            None
        }
    });
    Ok(Inner {
        version: Version::V1,
        memory,
        cpu,
        watched: Mutex::new(HashMap::new()),
    })
}

/// The mounted cgroup hierarchies, from `/proc/self/mountinfo`.
fn mounts() -> Result<Vec<Mount>, String> {
    let text = fs::read_to_string("/proc/self/mountinfo")
        .map_err(|e| format!("cannot read /proc/self/mountinfo: {e}"))?;
    Ok(parse_mounts(&text))
}

fn parse_mounts(text: &str) -> Vec<Mount> {
    text.lines()
        .filter_map(|line| {
            let (left, right) = line.split_once(" - ")?;
            let point = left.split(' ').nth(4)?;
            let mut right = right.split(' ');
            let fstype = right.next()?;
            let options = right.nth(1).unwrap_or("");
            fstype.starts_with("cgroup").then(|| Mount {
                point: PathBuf::from(point.replace("\\040", " ")),
                fstype: fstype.to_string(),
                options: options.split(',').map(str::to_string).collect(),
            })
        })
        .collect()
}

/// This process's cgroup path in the v1 hierarchy of `controller`.
fn own_path<'a>(proc_cgroup: &'a str, controller: &str) -> Option<&'a str> {
    proc_cgroup.lines().find_map(|l| {
        let mut parts = l.splitn(3, ':');
        let (_, names, path) = (parts.next()?, parts.next()?, parts.next()?);
        names.split(',').any(|n| n == controller).then_some(path)
    })
}

fn has_memory_controller(mount: &Path) -> bool {
    read_words(&mount.join("cgroup.controllers"))
        .iter()
        .any(|c| c == "memory")
}

fn read_words(path: &Path) -> Vec<String> {
    fs::read_to_string(path)
        .unwrap_or_default()
        .split_whitespace()
        .map(str::to_string)
        .collect()
}

/// `carmi-local.NAME.HASH`: the name made safe for a directory, and an
/// FNV-1a hash of the work directory, so two local RMs never share one.
fn parent_name(name: &str, work_dir: &Path) -> String {
    let safe: String = name
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' || c == '_' {
                c
            } else {
                '_'
            }
        })
        .take(64)
        .collect();
    let mut hash: u32 = 0x811c_9dc5;
    for b in work_dir.as_os_str().as_encoded_bytes() {
        hash = (hash ^ u32::from(*b)).wrapping_mul(0x0100_0193);
    }
    format!("carmi-local.{safe}.{hash:08x}")
}

/// Empties a parent left by an earlier run: every process cgroup in it is
/// killed and removed.
fn clean_stale(parent: &Path, version: Version) {
    let Ok(entries) = fs::read_dir(parent) else {
        return;
    };
    for entry in entries.flatten() {
        if !entry.file_type().is_ok_and(|t| t.is_dir()) {
            continue;
        }
        let dir = entry.path();
        let stale = ProcessCgroup {
            version,
            memory: dir.clone(),
            cpu: None,
        };
        let left = stale.pids().len();
        let gone = stale.kill_all();
        stale.remove();
        if left > 0 {
            tracing::info!(path = %dir.display(), killed = left, emptied = gone, "killed processes an earlier run left in its cgroup");
        }
        tracing::info!(path = %dir.display(), "removed a cgroup an earlier run left");
    }
}

fn make_dir(dir: &Path) -> Result<(), String> {
    match fs::create_dir(dir) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => Ok(()),
        Err(e) => Err(format!("cannot create cgroup {}: {e}", dir.display())),
    }
}

fn write(dir: &Path, file: &str, value: &str) -> io::Result<()> {
    let path = dir.join(file);
    let mut f = fs::OpenOptions::new()
        .write(true)
        .open(&path)
        .map_err(|e| context(e, &path))?;
    f.write_all(value.as_bytes()).map_err(|e| context(e, &path))
}

/// A setting that older kernels or configurations lack: its absence is not an error.
fn optional(r: io::Result<()>) {
    if let Err(e) = r {
        tracing::debug!(error = %e, "optional cgroup setting not applied");
    }
}

fn context(e: io::Error, path: &Path) -> io::Error {
    io::Error::new(e.kind(), format!("{}: {e}", path.display()))
}

/// The number after `key` in a `key value` per line file (`memory.events`).
fn keyed(text: &str, key: &str) -> Option<u64> {
    text.lines().find_map(|l| {
        let (k, v) = l.split_once(' ')?;
        (k == key).then(|| v.trim().parse().ok()).flatten()
    })
}

#[cfg(test)]
#[path = "cgroup_tests.rs"]
mod tests;
