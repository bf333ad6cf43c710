//! The supervisor that `carmi pool serve` is: it runs the embedded pool in a
//! child process (`carmi pool serve --child`) and starts it again, in the
//! same folder, when it dies of anything but a shutdown it asked for (a
//! crash, an abort, a SIGKILL, the OOM killer).
//!
//! A restarted pool keeps what matters: its global RM replays the job journal
//! in the folder, and its local RMs kill whatever the dead ones' job
//! processes left running (each job process itself dies with its local RM).
//! Its addresses change (ports are picked afresh), so the supervisor records
//! the new ones where `pool up` recorded the pool, as long as that record
//! still names this supervisor as `pool_pid`.
//!
//! The child writes its ready file beside the one `up` waits for; the
//! supervisor renames it into place only after it has stopped dying with
//! `up` (the parent-death signal `up` set), so that `up` can never exit
//! between the two and take an unrecorded pool with it. The child, in turn,
//! gets SIGTERM (a clean shutdown) if the supervisor dies.
//!
//! A pool that dies [`MAX_RESTARTS`] times within [`RESTART_WINDOW`] is not
//! started again: the supervisor exits with an error, in the pool's log.

use std::collections::VecDeque;
use std::path::{Path, PathBuf};
use std::process::ExitStatus;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};

use super::ServeArgs;

/// At most this many restarts within [`RESTART_WINDOW`].
pub const MAX_RESTARTS: usize = 5;
/// See [`MAX_RESTARTS`].
pub const RESTART_WINDOW: Duration = Duration::from_secs(60);
/// The pause before a restart.
const RESTART_PAUSE: Duration = Duration::from_millis(500);

/// How a child ended, for the log: `signal 9` or `exit code 1`.
fn describe(status: &ExitStatus) -> String {
    use std::os::unix::process::ExitStatusExt;
    match (status.signal(), status.code()) {
        (Some(sig), _) => format!("signal {sig}"),
        (None, Some(code)) => format!("exit code {code}"),
        (None, None) => format!("{status}"),
    }
}

/// Where the child writes its ready file.
fn child_ready_file(ready: &Path) -> PathBuf {
    ready.with_extension("child")
}

fn start_child(args: &ServeArgs) -> anyhow::Result<tokio::process::Child> {
    let mut cmd = tokio::process::Command::from(super::this_carmi()?);
    cmd.args(["pool", "serve", "--child", "--hosts"])
        .arg(args.up.hosts.to_string())
        .arg("--owners")
        .arg(&args.up.owners)
        .arg("--speedup")
        .arg(args.up.speedup.to_string())
        .arg("--seed")
        .arg(args.up.seed.to_string())
        .arg("--slots")
        .arg(args.up.slots.to_string())
        .arg("--dir")
        .arg(&args.dir)
        .arg("--ready-file")
        .arg(child_ready_file(&args.ready_file))
        .stdin(std::process::Stdio::null());
    // SAFETY: prctl only changes a flag of the child; async-signal-safe.
    unsafe {
        cmd.pre_exec(|| {
            // The pool shuts down cleanly if its supervisor dies. This thread
            // (block_on's, on a current-thread runtime) lives as long as the
            // supervisor, so the signal means the supervisor's death.
            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGTERM) < 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    cmd.spawn()
        .context("cannot start the embedded pool process")
}

/// The child is up: records its addresses. The first time, the ready file
/// goes where `up` waits for it (after this process stops dying with `up`);
/// after a restart, the new addresses go into the pool's record.
fn on_ready(args: &ServeArgs, first: bool) -> anyhow::Result<()> {
    let child_ready = child_ready_file(&args.ready_file);
    if first {
        // From here on the pool outlives `up`.
        // SAFETY: prctl with these arguments only changes a flag.
        unsafe { libc::prctl(libc::PR_SET_PDEATHSIG, 0) };
        return std::fs::rename(&child_ready, &args.ready_file)
            .with_context(|| format!("cannot write {}", args.ready_file.display()));
    }
    let text = std::fs::read_to_string(&child_ready)
        .with_context(|| format!("cannot read {}", child_ready.display()))?;
    let _ = std::fs::remove_file(&child_ready);
    let ready: toml::Table = text.parse().context("the restarted pool's ready file")?;
    super::record_restart(&ready)
}

/// Runs the pool in a child process until SIGTERM or SIGINT, starting it
/// again when it dies. Returns once the pool has stopped.
pub fn supervise(args: &ServeArgs) -> anyhow::Result<()> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("cannot start the async runtime")?;
    runtime.block_on(async {
        use tokio::signal::unix::{SignalKind, signal};
        let mut term = signal(SignalKind::terminate()).context("cannot handle SIGTERM")?;
        let mut int = signal(SignalKind::interrupt()).context("cannot handle SIGINT")?;
        let mut restarts: VecDeque<Instant> = VecDeque::new();
        let mut ever_ready = false;
        loop {
            let _ = std::fs::remove_file(child_ready_file(&args.ready_file));
            let mut child = start_child(args)?;
            let pid = child.id().unwrap_or(0);
            let mut ready = false;
            let status = loop {
                tokio::select! {
                    s = child.wait() => break s.context("cannot watch the pool process")?,
                    _ = term.recv() => return stop(&mut child, "SIGTERM").await,
                    _ = int.recv() => return stop(&mut child, "SIGINT").await,
                    _ = tokio::time::sleep(Duration::from_millis(50)), if !ready => {
                        if child_ready_file(&args.ready_file).exists() {
                            ready = true;
                            if let Err(e) = on_ready(args, !ever_ready) {
                                tracing::error!(error = %e, "cannot record the pool");
                                return stop(&mut child, "a failed start").await.and(Err(e));
                            }
                            ever_ready = true;
                        }
                    }
                }
            };
            if !ever_ready {
                // It never came up: `up` shows its log; nothing to restart.
                bail!("the embedded pool did not start ({})", describe(&status));
            }
            if status.success() {
                tracing::info!(pid, "the embedded pool stopped");
                return Ok(());
            }
            let now = Instant::now();
            while restarts
                .front()
                .is_some_and(|t| now.duration_since(*t) > RESTART_WINDOW)
            {
                restarts.pop_front();
            }
            if restarts.len() >= MAX_RESTARTS {
                bail!(
                    "the embedded pool (process {pid}) died ({}) for the {}th time in {} s; not restarting it",
                    describe(&status),
                    MAX_RESTARTS + 1,
                    RESTART_WINDOW.as_secs()
                );
            }
            restarts.push_back(now);
            // The pool writes a fresh secret and admin token at each start
            // (its signing key lives in memory only) and refuses to overwrite
            // either; clients read the files anew, so they follow.
            for name in ["pool.secret", "pool.admin.token"] {
                let file = args.dir.join(name);
                if let Err(e) = std::fs::remove_file(&file)
                    && e.kind() != std::io::ErrorKind::NotFound
                {
                    bail!("cannot remove {} before the restart: {e}", file.display());
                }
            }
            // A pause, so that a pool that dies at once does not spin.
            tokio::time::sleep(RESTART_PAUSE).await;
            tracing::warn!(
                "the embedded pool (process {pid}: its global RM and local RMs) died ({}); restarted",
                describe(&status)
            );
        }
    })
}

/// Forwards a stop to the pool and waits for its clean shutdown.
async fn stop(child: &mut tokio::process::Child, why: &str) -> anyhow::Result<()> {
    tracing::info!("{why}: stopping the pool");
    if let Some(pid) = child.id() {
        // SAFETY: a plain signal to our own child, not yet reaped.
        unsafe { libc::kill(pid as libc::pid_t, libc::SIGTERM) };
    }
    child
        .wait()
        .await
        .context("cannot watch the pool process")?;
    Ok(())
}
