//! Application processes: sandbox, start, wait, signal.
//!
//! Each process runs in `WORK_DIR/sandbox/<process>/` with a private copy of
//! its executable, stdout and stderr going to files there, and in a session
//! of its own (`setsid`), so that its process group holds it and every child
//! it starts: suspend, resume and kill signal the whole group.
//!
//! A dedicated thread per process blocks in `wait4`, which gives the exit
//! status and, from the kernel, the user and system CPU time of the process
//! and of the descendants it waited for. After the process exits the thread
//! kills whatever is left in its group (children must not outlive it), moves
//! the output files to `WORK_DIR/output/<job>/<process>.{out,err}`, removes
//! the sandbox, and only then reports the exit.
//!
//! A process dies with its local RM: it is forked from its waiting thread
//! with `PR_SET_PDEATHSIG` = SIGKILL, and its group is recorded on disk
//! ([`crate::orphans`]) until reaped, so that a restarted daemon kills what a
//! SIGKILLed one left behind ([`Launcher::kill_leftovers`]).
//!
//! Where cgroups are usable ([`crate::cgroup`]), each process also runs in
//! a cgroup of its own, entered before `exec`, bound to its job's requests:
//! signals reach everything in it, a descendant that left the group with
//! `setsid` included; at the exit everything in it is killed, its peak
//! memory read ([`ExitReport::usage`]) and the cgroup removed.
//!
//! Limits: without cgroups, a descendant that leaves the group with `setsid`
//! of its own, or a grandchild that is never waited for, escapes both the
//! kill and the CPU accounting. The parent-death signal reaches the group
//! leader only: after a SIGKILL of the daemon, what the leader started runs
//! on until the daemon starts again (which empties the cgroups it left).

use std::collections::HashMap;
use std::ffi::OsString;
use std::fs;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use carmi_api::coords::{ENV_SECRET, ENV_SECRET_FILE, ENV_TOKEN};
use carmi_api::ids::{HostId, JobId, ProcessId};
use carmi_api::jobcred::JobCredential;
use carmi_api::msg::{ExitStatus, ProcessUsage, Requests};
use tokio::sync::watch;

use crate::cgroup::{Cgroups, ProcessCgroup};
use crate::orphans::{GroupRecords, Sweep};
use crate::sandbox::SandboxError;

pub use crate::orphans::alive;

/// What to start.
#[derive(Clone, Debug)]
pub struct LaunchSpec {
    /// The process id given by the global RM.
    pub process: ProcessId,
    /// Its job.
    pub job: JobId,
    /// The slot it runs on.
    pub host: HostId,
    /// File name of the executable (`argv[0]`).
    pub name: String,
    /// The executable to copy into the sandbox (the cache entry).
    pub program: PathBuf,
    /// Arguments after `argv[0]`.
    pub args: Vec<String>,
    /// Extra environment (a master's, from its submit file).
    pub env: Vec<(String, String)>,
    /// Files for standard output and error instead of the sandbox's (a master's).
    pub stdio: (Option<PathBuf>, Option<PathBuf>),
    /// Files (the default), pipes handed back to the caller, or `/dev/null`.
    pub capture: Capture,
    /// Files copied into the sandbox, by file name, before the start.
    pub input_files: Vec<PathBuf>,
    /// Files copied into the sandbox under the given file name (a master's
    /// input files from the cache, where they are named by their hash).
    pub input_copies: Vec<(PathBuf, String)>,
    /// Files of the sandbox read after the exit, before the sandbox goes,
    /// for [`ExitReport::returned`] (a master's, see [`crate::returned`]).
    pub return_files: Vec<String>,
    /// The job's credential, written 0600 into the sandbox and named by
    /// `CARMI_SECRET_FILE`; `None`: the process gets no key at all.
    pub credential: Option<JobCredential>,
    /// The job's requests, binding its cgroup (when the launcher has cgroups).
    pub requests: Requests,
}

/// What the process's standard output and error are connected to.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Capture {
    /// Files: `stdio`'s, else the sandbox's, kept after the exit.
    #[default]
    Files,
    /// Pipes, returned in [`Launched::pipes`] for the caller to read.
    Pipes,
    /// `/dev/null`.
    Discard,
}

/// The read ends of a process's output pipes ([`Capture::Pipes`]).
#[derive(Debug)]
pub struct OutputPipes {
    /// Standard output.
    pub stdout: std::process::ChildStdout,
    /// Standard error.
    pub stderr: std::process::ChildStderr,
}

/// A started process.
#[derive(Debug)]
pub struct Launched {
    /// Its process group.
    pub group: ProcessGroup,
    /// Its output pipes, with [`Capture::Pipes`].
    pub pipes: Option<OutputPipes>,
}

/// How a process ended, from `wait4`.
#[derive(Clone, Debug, PartialEq)]
pub struct ExitReport {
    /// Exit code or signal.
    pub status: ExitStatus,
    /// User + system CPU seconds of the process and its waited-for descendants.
    pub cpu_seconds: f64,
    /// The [`LaunchSpec::return_files`] read from the sandbox.
    pub returned: crate::returned::Returned,
    /// Peak memory and whether it went over its request, from its cgroup.
    pub usage: ProcessUsage,
}

/// Why a process could not be started.
#[derive(Debug, thiserror::Error)]
pub enum SpawnError {
    /// The sandbox could not be prepared.
    #[error("cannot prepare sandbox {path}: {error}")]
    Sandbox {
        /// The file or directory.
        path: PathBuf,
        /// The cause.
        error: std::io::Error,
    },
    /// `exec` failed (the job's fault: see `carmi_api::msg::start_fault`).
    #[error("{}", carmi_api::msg::exec_failure(name, error))]
    Exec {
        /// The executable.
        name: String,
        /// The cause.
        error: std::io::Error,
    },
    /// No thread could be started to wait for the process (it was killed).
    #[error("cannot start a thread to wait for the process: {0}")]
    Waiter(std::io::Error),
    /// The launcher was closed ([`Launcher::close`]): the local RM is stopping.
    #[error("the local RM is shutting down and starts no more processes")]
    Closed,
    /// Its cgroup could not be made or bound to the job's requests.
    #[error("cannot bind the process to its job's requests (its cgroup): {0}")]
    Cgroup(std::io::Error),
    /// Every slot user serves another job.
    #[error(
        "no slot user is free for job {job}: all {count} serve other jobs on this machine; configure more with --slot-users"
    )]
    NoAccount {
        /// The job.
        job: JobId,
        /// How many accounts there are.
        count: usize,
    },
}

impl From<SandboxError> for SpawnError {
    fn from(e: SandboxError) -> SpawnError {
        SpawnError::Sandbox {
            path: e.path,
            error: e.error,
        }
    }
}

/// Starts processes in sandboxes under one work directory. Clones share
/// one gate and one table of live groups, so that [`Launcher::close`] stops
/// every clone and finds every process any of them started.
#[derive(Clone, Debug)]
pub struct Launcher {
    work_dir: PathBuf,
    env: Vec<(String, OsString)>,
    /// True once closed. Launches hold it for reading while they start a
    /// process and record its group; `close` takes it for writing, so that
    /// afterwards no launch is half done and none can begin.
    closed: Arc<RwLock<bool>>,
    /// Groups started and not yet reaped, whether or not the caller has
    /// heard of them yet.
    live: Arc<Mutex<HashMap<ProcessId, ProcessGroup>>>,
    /// The same groups on disk, for a restarted daemon to find.
    records: GroupRecords,
    /// The slot users processes run as; `None`: the daemon's own user.
    accounts: Option<crate::isolation::Accounts>,
    /// Where each process gets a cgroup of its own; `None`: unbound.
    cgroups: Option<Cgroups>,
}

impl Launcher {
    /// A launcher whose processes get `env` on top of the daemon's own
    /// environment (besides `CARMI_JOB`, `CARMI_PROCESS`, `CARMI_HOST`).
    pub fn new(work_dir: PathBuf, env: Vec<(String, OsString)>) -> Launcher {
        Launcher {
            records: GroupRecords::new(&work_dir),
            work_dir,
            env,
            closed: Arc::new(RwLock::new(false)),
            live: Arc::new(Mutex::new(HashMap::new())),
            accounts: None,
            cgroups: None,
        }
    }

    /// The same launcher, starting each process in a cgroup of its own
    /// under `cgroups` (`None`: processes run unbound).
    pub fn with_cgroups(mut self, cgroups: Option<Cgroups>) -> Launcher {
        self.cgroups = cgroups;
        self
    }

    /// The same launcher, running each job's processes as one of `accounts`
    /// ([`crate::isolation`]) instead of the daemon's own user.
    pub fn with_accounts(mut self, accounts: Option<crate::isolation::Accounts>) -> Launcher {
        self.accounts = accounts;
        self
    }

    /// Refuses every later launch ([`SpawnError::Closed`]), waits for the
    /// launches under way, and returns every process group started and not
    /// yet reaped: the caller kills them, so that nothing outlives it.
    pub fn close(&self) -> Vec<(ProcessId, ProcessGroup)> {
        *self.closed.write().unwrap_or_else(|e| e.into_inner()) = true;
        let live = self.live.lock().unwrap_or_else(|e| e.into_inner());
        live.iter().map(|(p, g)| (*p, g.clone())).collect()
    }

    /// The sandbox directory of `process`.
    pub fn sandbox_dir(&self, process: ProcessId) -> PathBuf {
        self.work_dir.join("sandbox").join(process.0.to_string())
    }

    /// Removes sandboxes left by an earlier run of the daemon: their processes
    /// were not ours to adopt, and their ids may be given out again.
    pub fn clean_stale_sandboxes(&self) {
        let dir = self.work_dir.join("sandbox");
        if dir.exists() {
            if let Err(e) = fs::remove_dir_all(&dir) {
                tracing::warn!(path = %dir.display(), error = %e, "cannot remove stale sandboxes");
            } else {
                tracing::info!(path = %dir.display(), "removed stale sandboxes");
            }
        }
        if self.accounts.is_some() {
            // Slot users pass through it to their own sandboxes, and list nothing.
            let made = fs::create_dir_all(&dir).and_then(|()| {
                use std::os::unix::fs::PermissionsExt;
                fs::set_permissions(&dir, fs::Permissions::from_mode(0o711))
            });
            if let Err(e) = made {
                tracing::warn!(path = %dir.display(), error = %e, "cannot make the sandbox directory");
            }
        }
    }

    /// Prepares the sandbox and starts the process in its own session; blocks
    /// only briefly (copying the executable). `on_exit` is called once, from
    /// the waiting thread, after the process has exited and its group and
    /// sandbox have been cleaned up.
    pub fn launch(
        &self,
        spec: &LaunchSpec,
        on_exit: impl FnOnce(ExitReport) + Send + 'static,
    ) -> Result<Launched, SpawnError> {
        // Held until the group is recorded in `live` (see `close`).
        let closed = self.closed.read().unwrap_or_else(|e| e.into_inner());
        if *closed {
            return Err(SpawnError::Closed);
        }
        let (started_tx, started_rx) = std::sync::mpsc::sync_channel(1);
        let me = self.clone();
        let spec = spec.clone();
        let (process, job, name) = (spec.process, spec.job, spec.name.clone());
        std::thread::Builder::new()
            .name(format!("carmi-wait-{}", process.0))
            .spawn(move || me.wait_on(spec, started_tx, on_exit))
            .map_err(SpawnError::Waiter)?;
        let launched = started_rx.recv().map_err(|_| {
            SpawnError::Waiter(std::io::Error::other(
                "the waiting thread ended before starting the process",
            ))
        })??;
        tracing::info!(%process, %job, pid = launched.group.pgid, %name, "process started");
        drop(closed);
        Ok(launched)
    }

    /// The waiting thread's life: starts `spec`'s process (and says how
    /// that went on `started_tx`), waits for it, cleans up after it (its group,
    /// cgroup, record, returned files, output) and calls `on_exit`.
    fn wait_on(
        &self,
        spec: LaunchSpec,
        started_tx: std::sync::mpsc::SyncSender<Result<Launched, SpawnError>>,
        on_exit: impl FnOnce(ExitReport),
    ) {
        let (process, job) = (spec.process, spec.job);
        // The child is forked from this thread, which lives until the
        // child is reaped: PR_SET_PDEATHSIG fires when the forking
        // *thread* ends, so a child forked from a pooled thread would
        // be killed whenever the pool retired that thread.
        let sandbox = self.sandbox_dir(process);
        // Held until the process and all it left are gone.
        let lease = match &self.accounts {
            Some(accounts) => match accounts.lease(job) {
                Some(lease) => Some(lease),
                None => {
                    let count = accounts.list().len();
                    let _ = started_tx.send(Err(SpawnError::NoAccount { job, count }));
                    return;
                }
            },
            None => None,
        };
        let cgroup = match self.make_cgroup(&spec) {
            Ok(cg) => cg,
            Err(e) => {
                let _ = started_tx.send(Err(e));
                return;
            }
        };
        let started = self.start_child(&spec, &sandbox, lease.as_ref(), cgroup.as_ref());
        let (pid, pipes) = match started {
            Ok(started) => started,
            Err(e) => {
                let _ = fs::remove_dir_all(&sandbox);
                if let (Some(cgroups), Some(cg)) = (&self.cgroups, &cgroup) {
                    cgroups.finish(process, cg, &spec.requests);
                }
                let _ = started_tx.send(Err(e));
                return;
            }
        };
        if let Err(e) = self.records.record(pid, process, job) {
            tracing::warn!(%process, pid, error = %e, "cannot record the process group; if this local RM is killed, a restart will not find what it leaves behind");
        }
        let (reaped_tx, reaped_rx) = watch::channel(false);
        let group = ProcessGroup {
            pgid: pid,
            reaped: reaped_rx,
            cgroup: cgroup.clone(),
        };
        self.live
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(process, group.clone());
        let _ = started_tx.send(Ok(Launched { group, pipes }));
        let mut report = wait_for(pid);
        // Whatever the process left behind in its group goes with it.
        signal_group(pid, libc::SIGKILL);
        if let (Some(cgroups), Some(cg)) = (&self.cgroups, &cgroup) {
            report.usage = cgroups.finish(process, cg, &spec.requests);
        }
        self.records.remove(pid);
        let _ = reaped_tx.send(true);
        self.live
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&process);
        if !spec.return_files.is_empty() {
            let collect = || crate::returned::collect(&sandbox, &spec.return_files);
            // As the account: a link it swapped in after the checks
            // still reaches only what it could read itself.
            report.returned = match &lease {
                Some(l) => crate::isolation::as_account(l.account(), collect),
                None => collect(),
            };
        }
        crate::sandbox::keep_output(&sandbox, &self.output_dir(job), process);
        drop(lease);
        on_exit(report);
    }

    /// The cgroup of `spec`'s process, made and bound to its requests,
    /// when this launcher has cgroups.
    fn make_cgroup(&self, spec: &LaunchSpec) -> Result<Option<ProcessCgroup>, SpawnError> {
        let Some(cgroups) = &self.cgroups else {
            return Ok(None);
        };
        let cg = cgroups.bind(spec.process, &spec.requests);
        cg.map(Some).map_err(SpawnError::Cgroup)
    }

    /// Removes this launcher's parent cgroups once every process is gone
    /// (one still busy stays, for the next start to empty).
    pub fn remove_cgroups(&self) {
        if let Some(c) = &self.cgroups {
            c.remove_parents();
        }
    }

    /// Where a job's processes' output is kept once they exited.
    pub fn output_dir(&self, job: JobId) -> PathBuf {
        self.work_dir.join("output").join(job.0.to_string())
    }

    /// SIGKILLs every process group an earlier run of the daemon started and
    /// left alive (it was killed before it could), from the records in the
    /// work directory ([`crate::orphans`]), then whatever else is left in
    /// the cgroups it made (a process that left its group with `setsid`),
    /// and removes them. Call before the first launch.
    pub fn kill_leftovers(&self) -> Sweep {
        let sweep = self.records.sweep();
        if let Some(cgroups) = &self.cgroups {
            cgroups.kill_leftovers();
        }
        sweep
    }

    /// Prepares the sandbox and starts the child; its pid (= its group id)
    /// and, with [`Capture::Pipes`], its output pipes.
    fn start_child(
        &self,
        spec: &LaunchSpec,
        sandbox: &Path,
        lease: Option<&crate::isolation::Lease>,
        cgroup: Option<&ProcessCgroup>,
    ) -> Result<(libc::pid_t, Option<OutputPipes>), SpawnError> {
        // Opened here, written by the child before `exec` (`cgroup::enter`);
        // closed by the child's `exec` and, here, when this returns.
        let entry = match cgroup {
            Some(cg) => cg.entry_files().map_err(SpawnError::Cgroup)?,
            None => Vec::new(),
        };
        let entry_fds = crate::cgroup::raw(&entry);
        let account = lease.map(crate::isolation::Lease::account);
        let contents = crate::sandbox::Contents {
            name: &spec.name,
            program: &spec.program,
            input_files: &spec.input_files,
            input_copies: &spec.input_copies,
        };
        // Made by root, every file relative to the new directory, which
        // goes to the account last (see `crate::sandbox`, "No way up").
        let made = crate::sandbox::Sandbox::create(sandbox, account)?;
        let exe = made.fill(&contents)?;
        let (stdout, stderr): (Stdio, Stdio) = match spec.capture {
            Capture::Files => {
                let (out, err) = made.output_files(&spec.stdio)?;
                (out.into(), err.into())
            }
            Capture::Pipes => (Stdio::piped(), Stdio::piped()),
            Capture::Discard => (Stdio::null(), Stdio::null()),
        };
        let credential = made.credential(spec.credential.as_ref())?;
        made.hand_over()?;

        let mut cmd =
            self.job_command(spec, (&exe, sandbox), (stdout, stderr), credential, account);
        in_own_session(&mut cmd, entry_fds);
        let mut child = spawn_retrying(&mut cmd).map_err(|error| SpawnError::Exec {
            name: spec.name.clone(),
            error,
        })?;
        let pid = child.id() as libc::pid_t;
        let pipes = match (child.stdout.take(), child.stderr.take()) {
            (Some(stdout), Some(stderr)) => Some(OutputPipes { stdout, stderr }),
            _ => None,
        };
        // The waiting thread reaps the child with wait4; std's handle must not.
        drop(child);
        Ok((pid, pipes))
    }

    /// The command that runs `spec`'s executable `exe` in `sandbox`: its
    /// arguments, standard streams and environment (the daemon's, the
    /// launcher's, the job's, never a pool secret or token), as `account`.
    fn job_command(
        &self,
        spec: &LaunchSpec,
        (exe, sandbox): (&Path, &Path),
        (stdout, stderr): (Stdio, Stdio),
        credential: Option<PathBuf>,
        account: Option<&crate::isolation::Account>,
    ) -> Command {
        let mut cmd = Command::new(exe);
        cmd.arg0(&spec.name)
            .args(&spec.args)
            .current_dir(sandbox)
            .stdin(Stdio::null())
            .stdout(stdout)
            .stderr(stderr)
            .env("CARMI_JOB", spec.job.0.to_string())
            .env("CARMI_PROCESS", spec.process.0.to_string())
            .env("CARMI_HOST", spec.host.0.to_string());
        for (k, v) in &self.env {
            cmd.env(k, v);
        }
        for (k, v) in &spec.env {
            cmd.env(k, v);
        }
        // Last, so that nothing above names the pool's secret or a token to
        // the job, not even what the daemon itself inherited.
        for name in [ENV_TOKEN, ENV_SECRET, ENV_SECRET_FILE] {
            cmd.env_remove(name);
        }
        if let Some(path) = &credential {
            cmd.env(ENV_SECRET_FILE, path);
        }
        if let Some(a) = account {
            // std sets the group, drops root's supplementary groups and sets
            // the user in the child before `chdir` and `pre_exec` below, so
            // the parent-death signal set there survives the switch.
            cmd.uid(a.uid)
                .gid(a.gid)
                .env("HOME", sandbox)
                .env("USER", &a.name)
                .env("LOGNAME", &a.name);
        }
        cmd
    }
}

/// Blocks until `pid` exits; its status and CPU time.
fn wait_for(pid: libc::pid_t) -> ExitReport {
    let mut status: libc::c_int = 0;
    // SAFETY: rusage is plain data; all-zero is a valid value for wait4 to overwrite.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    loop {
        // SAFETY: valid out-pointers; `pid` is our own unreaped child.
        let r = unsafe { libc::wait4(pid, &mut status, 0, &mut ru) };
        if r == pid {
            break;
        }
        let err = std::io::Error::last_os_error();
        if err.raw_os_error() == Some(libc::EINTR) {
            continue;
        }
        // Only possible if something else in the daemon reaped our child.
        tracing::error!(pid, error = %err, "wait4 failed; the exit status is lost");
        return ExitReport {
            status: ExitStatus::FailedToStart(format!("lost track of the process: {err}")),
            cpu_seconds: 0.0,
            returned: Default::default(),
            usage: ProcessUsage::default(),
        };
    }
    let tv = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
    let cpu_seconds = tv(ru.ru_utime) + tv(ru.ru_stime);
    let status = if libc::WIFEXITED(status) {
        ExitStatus::Code(libc::WEXITSTATUS(status))
    } else if libc::WIFSIGNALED(status) {
        ExitStatus::Signal(libc::WTERMSIG(status))
    } else {
        ExitStatus::FailedToStart(format!("unexpected wait status {status:#x}"))
    };
    ExitReport {
        status,
        cpu_seconds,
        returned: Default::default(),
        usage: ProcessUsage::default(),
    }
}

/// Sends `sig` to every process of group `pgid`; a group that is gone is not an error.
fn signal_group(pgid: libc::pid_t, sig: libc::c_int) -> bool {
    // A group id of 0 or 1 would signal ourselves or everything: never.
    if pgid <= 1 {
        return false;
    }
    // SAFETY: kill has no memory effects; the negative pid addresses the group.
    unsafe { libc::kill(-pgid, sig) == 0 }
}

/// A running process and its group (the process leads it: pgid = pid).
#[derive(Clone, Debug)]
pub struct ProcessGroup {
    pgid: libc::pid_t,
    reaped: watch::Receiver<bool>,
    /// Its cgroup, whose every process a signal reaches too.
    cgroup: Option<ProcessCgroup>,
}

impl ProcessGroup {
    /// The group id (= the process's pid).
    pub fn pgid(&self) -> i32 {
        self.pgid
    }

    /// True once the process has exited and been reaped.
    pub fn is_reaped(&self) -> bool {
        *self.reaped.borrow()
    }

    /// Sends `sig` to the group, and to every process of its cgroup (one
    /// that left the group with `setsid` included), unless the process is
    /// already reaped (its pid may then be reused); true if delivered.
    pub fn signal(&self, sig: i32) -> bool {
        if self.is_reaped() {
            return false;
        }
        let group = signal_group(self.pgid, sig);
        let others = self.cgroup.as_ref().is_some_and(|cg| cg.signal_all(sig));
        group || others
    }

    /// Stops every process of the group (owner back).
    pub fn suspend(&self) -> bool {
        self.signal(libc::SIGSTOP)
    }

    /// Continues every process of the group.
    pub fn resume(&self) -> bool {
        self.signal(libc::SIGCONT)
    }

    /// Waits until the process has been reaped.
    pub async fn reaped(&self) {
        let mut rx = self.reaped.clone();
        // An error means the waiting thread is gone, which it only is after reaping.
        let _ = rx.wait_for(|r| *r).await;
    }

    /// SIGTERM to the group, then SIGKILL if the process has not exited
    /// after `grace`. Returns once the process has been reaped.
    pub async fn terminate(&self, grace: Duration) {
        if self.signal(libc::SIGTERM) {
            // A stopped process acts on SIGTERM only once continued.
            self.signal(libc::SIGCONT);
        }
        if tokio::time::timeout(grace, self.reaped()).await.is_err() {
            tracing::info!(
                pgid = self.pgid,
                "still running after SIGTERM; sending SIGKILL"
            );
            self.signal(libc::SIGKILL);
            self.reaped().await;
        }
    }

    /// SIGKILL to the group at once (daemon going away without time to wait).
    pub fn kill_now(&self) {
        self.signal(libc::SIGKILL);
    }
}

#[path = "spawn_exec.rs"]
mod exec;
use exec::{in_own_session, spawn_retrying};

#[cfg(test)]
#[path = "spawn_tests.rs"]
pub(crate) mod tests;
