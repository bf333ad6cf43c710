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
//! Limits: a descendant that leaves the group with `setsid` of its own, or a
//! grandchild that is never waited for, escapes both the kill and the CPU
//! accounting; closing that gap needs cgroups.

use std::collections::HashMap;
use std::ffi::OsString;
use std::fs::{self, File};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use carmi_api::ids::{HostId, JobId, ProcessId};
use carmi_api::msg::ExitStatus;
use tokio::sync::watch;

/// True while process `pid` exists and is not a zombie (from `/proc`), for
/// tests and tools that check that a process group really died; the daemon
/// itself learns of exits from `wait4`.
pub fn alive(pid: i32) -> bool {
    match fs::read_to_string(format!("/proc/{pid}/stat")) {
        // The state follows the command name, which may itself hold `)`.
        Ok(stat) => !stat
            .rsplit_once(')')
            .is_some_and(|(_, rest)| rest.trim_start().starts_with('Z')),
        Err(_) => false,
    }
}

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
    /// `exec` failed.
    #[error("cannot execute {name}: {error}")]
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
}

impl Launcher {
    /// A launcher whose processes get `env` on top of the daemon's own
    /// environment (besides `CARMI_JOB`, `CARMI_PROCESS`, `CARMI_HOST`).
    pub fn new(work_dir: PathBuf, env: Vec<(String, OsString)>) -> Launcher {
        Launcher {
            work_dir,
            env,
            closed: Arc::new(RwLock::new(false)),
            live: Arc::new(Mutex::new(HashMap::new())),
        }
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
        let sandbox = self.sandbox_dir(spec.process);
        let (pid, pipes) = match self.start_child(spec, &sandbox) {
            Ok(started) => started,
            Err(e) => {
                let _ = fs::remove_dir_all(&sandbox);
                return Err(e);
            }
        };
        let (reaped_tx, reaped_rx) = watch::channel(false);
        let output_dir = self.work_dir.join("output").join(spec.job.0.to_string());
        let process = spec.process;
        let group = ProcessGroup {
            pgid: pid,
            reaped: reaped_rx,
        };
        let live = self.live.clone();
        live.lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(process, group.clone());
        let spawned = std::thread::Builder::new()
            .name(format!("carmi-wait-{}", process.0))
            .spawn(move || {
                let report = wait_for(pid);
                // Whatever the process left behind in its group goes with it.
                signal_group(pid, libc::SIGKILL);
                let _ = reaped_tx.send(true);
                live.lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .remove(&process);
                keep_output(&sandbox, &output_dir, process);
                on_exit(report);
            });
        if let Err(e) = spawned {
            self.live
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .remove(&process);
            signal_group(pid, libc::SIGKILL);
            let _ = wait_for(pid);
            let _ = fs::remove_dir_all(self.sandbox_dir(process));
            return Err(SpawnError::Waiter(e));
        }
        tracing::info!(%process, job = %spec.job, pid, name = %spec.name, "process started");
        drop(closed);
        Ok(Launched { group, pipes })
    }

    /// Prepares the sandbox and starts the child; its pid (= its group id)
    /// and, with [`Capture::Pipes`], its output pipes.
    fn start_child(
        &self,
        spec: &LaunchSpec,
        sandbox: &Path,
    ) -> Result<(libc::pid_t, Option<OutputPipes>), SpawnError> {
        let sb_err = |path: &Path| {
            let path = path.to_path_buf();
            move |error| SpawnError::Sandbox { path, error }
        };
        if sandbox.exists() {
            fs::remove_dir_all(sandbox).map_err(sb_err(sandbox))?;
        }
        fs::create_dir_all(sandbox).map_err(sb_err(sandbox))?;
        let file_name = sandbox_file_name(&spec.name);
        let exe = sandbox.join(&file_name);
        // A private copy rather than a hard link: a process that rewrote its
        // own file would otherwise corrupt the cache for every later job.
        fs::copy(&spec.program, &exe).map_err(sb_err(&exe))?;
        fs::set_permissions(&exe, fs::Permissions::from_mode(0o700)).map_err(sb_err(&exe))?;
        for input in &spec.input_files {
            let Some(name) = input.file_name() else {
                return Err(SpawnError::Sandbox {
                    path: input.clone(),
                    error: std::io::Error::other("an input file needs a file name"),
                });
            };
            fs::copy(input, sandbox.join(name)).map_err(sb_err(input))?;
        }
        let open = |chosen: &Option<PathBuf>, default: &str| {
            let path = chosen.clone().unwrap_or_else(|| sandbox.join(default));
            if let Some(dir) = path.parent() {
                fs::create_dir_all(dir).map_err(sb_err(dir))?;
            }
            File::create(&path).map_err(sb_err(&path))
        };
        let (stdout, stderr): (Stdio, Stdio) = match spec.capture {
            Capture::Files => (
                open(&spec.stdio.0, "stdout")?.into(),
                open(&spec.stdio.1, "stderr")?.into(),
            ),
            Capture::Pipes => (Stdio::piped(), Stdio::piped()),
            Capture::Discard => (Stdio::null(), Stdio::null()),
        };

        let mut cmd = Command::new(&exe);
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
        // SAFETY: setsid is async-signal-safe and touches no memory of the parent.
        unsafe {
            cmd.pre_exec(|| {
                if libc::setsid() == -1 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
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
}

/// A name for the executable inside the sandbox that cannot escape it or
/// clash with the output files.
fn sandbox_file_name(name: &str) -> String {
    let base: String = name
        .rsplit('/')
        .next()
        .unwrap_or("")
        .chars()
        .filter(|c| !c.is_control())
        .collect();
    match base.as_str() {
        "" | "." | ".." => "program".into(),
        "stdout" | "stderr" => format!("{base}.exe"),
        _ => base,
    }
}

/// `Command::spawn`, retried on ETXTBSY: another thread may be forking at
/// the moment we closed the freshly written executable, and its child holds a
/// copy of our write descriptor until it execs.
fn spawn_retrying(cmd: &mut Command) -> std::io::Result<std::process::Child> {
    let mut tries = 0;
    loop {
        match cmd.spawn() {
            Err(e) if e.raw_os_error() == Some(libc::ETXTBSY) && tries < 50 => {
                tries += 1;
                std::thread::sleep(Duration::from_millis(10));
            }
            other => return other,
        }
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
    }
}

/// Moves stdout/stderr out of the sandbox and removes it.
fn keep_output(sandbox: &Path, output_dir: &Path, process: ProcessId) {
    if let Err(e) = fs::create_dir_all(output_dir) {
        tracing::warn!(path = %output_dir.display(), error = %e, "cannot create output directory");
    } else {
        for (from, ext) in [("stdout", "out"), ("stderr", "err")] {
            let src = sandbox.join(from);
            let dst = output_dir.join(format!("{}.{ext}", process.0));
            // A master may have written elsewhere (its submit file's output/error).
            if !src.exists() {
                continue;
            }
            if let Err(e) = fs::rename(&src, &dst) {
                tracing::warn!(from = %src.display(), to = %dst.display(), error = %e, "cannot keep output file");
            }
        }
    }
    if let Err(e) = fs::remove_dir_all(sandbox) {
        tracing::warn!(path = %sandbox.display(), error = %e, "cannot remove sandbox");
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

    /// Sends `sig` to the group unless the process is already reaped (its
    /// pid may then be reused); true if delivered.
    pub fn signal(&self, sig: i32) -> bool {
        !self.is_reaped() && signal_group(self.pgid, sig)
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

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use std::sync::mpsc;
    use std::time::Instant;

    #[test]
    fn alive_is_false_for_a_zombie_and_for_a_reaped_process() {
        assert!(alive(std::process::id() as i32));
        let mut child = Command::new("true").spawn().expect("run true");
        let pid = child.id() as i32;
        let deadline = Instant::now() + Duration::from_secs(10);
        while alive(pid) {
            assert!(Instant::now() < deadline, "`true` did not exit");
            std::thread::sleep(Duration::from_millis(5));
        }
        // Not reaped yet: a zombie, which counts as dead.
        assert!(Path::new(&format!("/proc/{pid}")).exists());
        child.wait().expect("reap");
        assert!(!alive(pid));
    }

    /// A temporary directory removed on drop (tests only; no extra dependency).
    pub(crate) struct TempDir(PathBuf);

    impl TempDir {
        pub(crate) fn new(tag: &str) -> TempDir {
            let p = std::env::temp_dir().join(format!(
                "carmi-local-test-{tag}-{}-{:08x}",
                std::process::id(),
                rand::random::<u32>()
            ));
            fs::create_dir_all(&p).unwrap();
            TempDir(p)
        }

        pub(crate) fn path(&self) -> &Path {
            &self.0
        }
    }

    impl Drop for TempDir {
        fn drop(&mut self) {
            let _ = fs::remove_dir_all(&self.0);
        }
    }

    fn shell(process: u64, script: &str) -> LaunchSpec {
        LaunchSpec {
            process: ProcessId(process),
            job: JobId(7),
            host: HostId(3),
            name: "sh".into(),
            program: PathBuf::from("/bin/sh"),
            args: vec!["-c".into(), script.into()],
            env: Vec::new(),
            stdio: (None, None),
            capture: Capture::Files,
            input_files: Vec::new(),
        }
    }

    /// Kills the group when a test ends, even by a failed assertion, so that
    /// no stopped process outlives the test binary.
    struct Guard(ProcessGroup);

    impl std::ops::Deref for Guard {
        type Target = ProcessGroup;
        fn deref(&self) -> &ProcessGroup {
            &self.0
        }
    }

    impl Drop for Guard {
        fn drop(&mut self) {
            self.0.kill_now();
        }
    }

    fn launch(l: &Launcher, spec: &LaunchSpec) -> (Guard, mpsc::Receiver<ExitReport>) {
        let (tx, rx) = mpsc::channel();
        let g = l
            .launch(spec, move |r| {
                let _ = tx.send(r);
            })
            .unwrap()
            .group;
        (Guard(g), rx)
    }

    /// Live (non-zombie) processes whose process group is `pgid`.
    fn live_members(pgid: i32) -> Vec<i32> {
        let mut out = Vec::new();
        for e in fs::read_dir("/proc").unwrap().flatten() {
            let Ok(pid) = e.file_name().to_string_lossy().parse::<i32>() else {
                continue;
            };
            let Ok(stat) = fs::read_to_string(format!("/proc/{pid}/stat")) else {
                continue;
            };
            // Fields after the command name, which is in parentheses and may hold spaces.
            let Some(rest) = stat.rsplit_once(')').map(|(_, r)| r) else {
                continue;
            };
            let f: Vec<&str> = rest.split_whitespace().collect();
            if f.len() > 2 && f[2] == pgid.to_string() && f[0] != "Z" && f[0] != "X" {
                out.push(pid);
            }
        }
        out
    }

    /// Members of group `pgid` that are running `sleep` (a shell that has only
    /// forked may still be blocked in vfork, unable to stop).
    fn sleeps(pgid: i32) -> usize {
        live_members(pgid)
            .into_iter()
            .filter(|p| {
                fs::read_to_string(format!("/proc/{p}/comm")).is_ok_and(|c| c.trim() == "sleep")
            })
            .count()
    }

    fn wait_until(what: &str, mut cond: impl FnMut() -> bool) {
        let t = Instant::now();
        while !cond() {
            assert!(
                t.elapsed() < Duration::from_secs(5),
                "timed out waiting for {what}"
            );
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    #[tokio::test]
    async fn kill_reaches_the_whole_process_group() {
        let dir = TempDir::new("pgkill");
        let l = Launcher::new(dir.path().to_path_buf(), vec![]);
        let (g, rx) = launch(&l, &shell(1, "sleep 100 & sleep 100"));
        wait_until("both sleeps", || sleeps(g.pgid()) == 2);
        let t = Instant::now();
        g.terminate(Duration::from_secs(2)).await;
        assert!(t.elapsed() < Duration::from_secs(1), "SIGTERM was enough");
        let r = rx.recv_timeout(Duration::from_secs(5)).unwrap();
        assert_eq!(r.status, ExitStatus::Signal(libc::SIGTERM));
        wait_until("the group to die", || live_members(g.pgid()).is_empty());
        assert!(!g.signal(libc::SIGTERM), "no signal after reaping");
        assert!(!l.sandbox_dir(ProcessId(1)).exists());
    }

    #[tokio::test]
    async fn sigterm_ignorers_get_sigkill_after_the_grace_period() {
        let dir = TempDir::new("pgkill2");
        let l = Launcher::new(dir.path().to_path_buf(), vec![]);
        let (g, rx) = launch(&l, &shell(2, "trap '' TERM; sleep 100 & sleep 100"));
        wait_until("both sleeps", || sleeps(g.pgid()) == 2);
        let t = Instant::now();
        g.terminate(Duration::from_millis(300)).await;
        assert!(t.elapsed() >= Duration::from_millis(300));
        let r = rx.recv_timeout(Duration::from_secs(5)).unwrap();
        assert_eq!(r.status, ExitStatus::Signal(libc::SIGKILL));
        wait_until("the group to die", || live_members(g.pgid()).is_empty());
    }

    #[test]
    fn children_left_behind_die_with_the_process() {
        let dir = TempDir::new("leftover");
        let l = Launcher::new(dir.path().to_path_buf(), vec![]);
        let (g, rx) = launch(&l, &shell(3, "sleep 100 & exit 0"));
        let r = rx.recv_timeout(Duration::from_secs(5)).unwrap();
        assert_eq!(r.status, ExitStatus::Code(0));
        wait_until("the background sleep to die", || {
            live_members(g.pgid()).is_empty()
        });
    }

    #[test]
    fn cpu_time_of_a_busy_child_is_reported() {
        let dir = TempDir::new("cpu");
        let l = Launcher::new(dir.path().to_path_buf(), vec![]);
        // The work happens in a grandchild that the shell waits for: its CPU
        // time reaches us through the shell's rusage.
        let script = r#"sh -c 'i=0; while [ $i -lt 100000 ]; do i=$((i+1)); done'; exit 4"#;
        let (_g, rx) = launch(&l, &shell(4, script));
        let r = rx.recv_timeout(Duration::from_secs(10)).unwrap();
        assert_eq!(r.status, ExitStatus::Code(4));
        assert!(r.cpu_seconds > 0.05, "cpu {}", r.cpu_seconds);
    }

    #[test]
    fn environment_sandbox_and_outputs() {
        let dir = TempDir::new("env");
        let l = Launcher::new(
            dir.path().to_path_buf(),
            vec![("CARMI_LOCAL".into(), "127.0.0.1:9".into())],
        );
        let script =
            "echo $CARMI_JOB $CARMI_PROCESS $CARMI_HOST $CARMI_LOCAL; pwd; echo oops >&2; exit 3";
        let (_g, rx) = launch(&l, &shell(5, script));
        let r = rx.recv_timeout(Duration::from_secs(5)).unwrap();
        assert_eq!(r.status, ExitStatus::Code(3));
        let out = fs::read_to_string(dir.path().join("output/7/5.out")).unwrap();
        let mut lines = out.lines();
        assert_eq!(lines.next(), Some("7 5 3 127.0.0.1:9"));
        assert!(lines.next().unwrap().ends_with("/sandbox/5"), "{out}");
        let err = fs::read_to_string(dir.path().join("output/7/5.err")).unwrap();
        assert_eq!(err, "oops\n");
        assert!(!l.sandbox_dir(ProcessId(5)).exists());
    }

    #[tokio::test]
    async fn suspend_and_resume_stop_and_continue_the_group() {
        let dir = TempDir::new("stop");
        let l = Launcher::new(dir.path().to_path_buf(), vec![]);
        let (g, rx) = launch(&l, &shell(6, "sleep 100 & sleep 100"));
        wait_until("both sleeps", || sleeps(g.pgid()) == 2);
        let states = |pgid: i32| -> Vec<String> {
            live_members(pgid)
                .into_iter()
                .filter_map(|p| {
                    let s = fs::read_to_string(format!("/proc/{p}/stat")).ok()?;
                    Some(s.rsplit_once(')')?.1.split_whitespace().next()?.to_string())
                })
                .collect()
        };
        assert!(g.suspend());
        wait_until("all stopped", || states(g.pgid()).iter().all(|s| s == "T"));
        assert!(g.resume());
        wait_until("all running", || states(g.pgid()).iter().all(|s| s != "T"));
        // Killing a stopped group works too.
        g.suspend();
        g.terminate(Duration::from_secs(2)).await;
        assert_eq!(
            rx.recv_timeout(Duration::from_secs(5)).unwrap().status,
            ExitStatus::Signal(libc::SIGTERM)
        );
    }

    #[test]
    fn unusable_names_and_missing_programs() {
        assert_eq!(sandbox_file_name("../../bin/evil"), "evil");
        assert_eq!(sandbox_file_name(".."), "program");
        assert_eq!(sandbox_file_name("stdout"), "stdout.exe");
        let dir = TempDir::new("missing");
        let l = Launcher::new(dir.path().to_path_buf(), vec![]);
        let mut spec = shell(8, "true");
        spec.program = dir.path().join("nope");
        assert!(matches!(
            l.launch(&spec, |_| {}),
            Err(SpawnError::Sandbox { .. })
        ));
        // A script whose interpreter does not exist fails at exec.
        let junk = dir.path().join("junk");
        fs::write(&junk, b"#!/nonexistent/interpreter\n").unwrap();
        spec.program = junk;
        let err = l.launch(&spec, |_| {}).unwrap_err();
        assert!(matches!(err, SpawnError::Exec { .. }), "{err}");
        assert!(
            !l.sandbox_dir(ProcessId(8)).exists(),
            "failed launches leave no sandbox"
        );
    }

    /// Shutdown's gate: once closed, nothing starts, and every process that
    /// did start (its launch reported or not, from any clone) is listed.
    #[test]
    fn a_closed_launcher_starts_nothing_and_lists_what_it_started() {
        let dir = TempDir::new("close");
        let l = Launcher::new(dir.path().to_path_buf(), vec![]);
        let clone = l.clone();
        let (g, rx) = launch(&clone, &shell(9, "sleep 100"));
        let (_done, done_rx) = launch(&l, &shell(10, "true"));
        done_rx.recv_timeout(Duration::from_secs(5)).unwrap();
        let listed = l.close();
        assert_eq!(listed.len(), 1, "only the live process is listed");
        assert_eq!(listed[0].0, ProcessId(9));
        assert_eq!(listed[0].1.pgid(), g.pgid());
        let err = clone.launch(&shell(11, "true"), |_| {}).unwrap_err();
        assert!(matches!(err, SpawnError::Closed), "{err}");
        assert!(!l.sandbox_dir(ProcessId(11)).exists());
        listed[0].1.kill_now();
        assert_eq!(
            rx.recv_timeout(Duration::from_secs(5)).unwrap().status,
            ExitStatus::Signal(libc::SIGKILL)
        );
    }
}
