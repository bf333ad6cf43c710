//! `carmi pool up`, `carmi pool down`, and the hidden `carmi pool serve`
//! that `up` runs in the background.
//!
//! `up` re-executes this program as `carmi pool serve` in a new session
//! (so that the terminal's Ctrl-C and hang-up do not reach it), which runs
//! the pool in a child process and restarts it if it dies
//! ([`supervise`]), with its
//! output in `pool.log` in the pool's folder, waits for the ready file that
//! `serve` writes once every local RM has registered, and records the pool in
//! a file of its own, [`carmi_api::coords::record_path`]
//! (`$XDG_STATE_HOME/carmi/pool-up.toml`, else
//! `$HOME/.local/state/carmi/pool-up.toml`), which every `carmi` command and
//! every WoDi program started by hand reads while the pool runs:
//!
//! ```toml
//! pool = "127.0.0.1:40123"              # the global RM
//! secret = "/tmp/carmi-pool-.../pool.secret"
//! local = "127.0.0.1:40125"             # the submit-side local RM
//! pool_pid = 12345                      # the `carmi pool serve` process
//! ```
//!
//! The user's own config file is never written.
//! `down` sends SIGTERM to the serve process (which stops every daemon and
//! job process and removes the folder), waits, falls back to SIGKILL, removes
//! the folder if it is still there, and removes those keys.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use carmi_pool::{EmbeddedPool, PoolOptions};

/// How long `up` waits for the pool to come up.
const UP_TIMEOUT: Duration = Duration::from_secs(60);
/// How long `down` waits after SIGTERM before SIGKILL.
const DOWN_TIMEOUT: Duration = Duration::from_secs(20);
/// Prefix of the folders `up` creates; `down` removes only folders named so.
use carmi_pool::sweep::DIR_PREFIX;

// The supervisor of a background pool: a part of running one, below it.
pub(crate) mod supervise;

/// How to run this command again, when it is not this executable (see
/// [`crate::run`]): a program and the arguments before the subcommand.
static LAUNCHER: std::sync::OnceLock<Vec<std::ffi::OsString>> = std::sync::OnceLock::new();

/// Makes `pool up` and its supervisor start `launcher` (a program and its
/// first arguments) rather than this executable; the first call wins.
pub(crate) fn set_launcher(launcher: Vec<std::ffi::OsString>) {
    let _ = LAUNCHER.set(launcher);
}

/// A command that runs this `carmi` again: the launcher if one was set,
/// else this executable. Arguments added after it are `carmi`'s.
pub(crate) fn this_carmi() -> anyhow::Result<Command> {
    match LAUNCHER.get().and_then(|l| l.split_first()) {
        Some((program, first)) => {
            let mut cmd = Command::new(program);
            cmd.args(first);
            Ok(cmd)
        }
        None => Ok(Command::new(
            std::env::current_exe().context("cannot find the carmi program")?,
        )),
    }
}

/// Options of `carmi pool up`.
#[derive(clap::Args, Debug, Clone)]
pub struct UpArgs {
    /// Number of pool machines.
    #[arg(long, default_value_t = 16)]
    pub hosts: usize,
    /// Owner model: none, stochastic, or trace:FILE.
    #[arg(long, default_value = "none", value_name = "MODEL")]
    pub owners: String,
    /// Virtual seconds of owner behaviour per wall second.
    #[arg(long, default_value_t = 1.0)]
    pub speedup: f64,
    /// Seed for owners and machine ads.
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// Job slots per machine.
    #[arg(long, default_value_t = 1)]
    pub slots: u32,
}

/// Options of the hidden `carmi pool serve`.
#[derive(clap::Args, Debug, Clone)]
pub struct ServeArgs {
    /// The pool as for `up`.
    #[command(flatten)]
    pub up: UpArgs,
    /// The pool's folder.
    #[arg(long, value_name = "DIR")]
    pub dir: PathBuf,
    /// Written (pool, secret, local, pool_pid) once the pool is up.
    #[arg(long, value_name = "FILE")]
    pub ready_file: PathBuf,
    /// Run the pool in this process; without it, `serve` runs the pool in a
    /// child process and restarts it when it dies ([`supervise`]).
    #[arg(long)]
    pub child: bool,
}

/// What `pool up` recorded.
#[derive(Debug, Clone, PartialEq)]
pub struct Recorded {
    /// The global RM, `HOST:PORT`.
    pub pool: String,
    /// The secret file.
    pub secret: PathBuf,
    /// The submit-side local RM, `HOST:PORT`.
    pub local: Option<String>,
    /// The background process.
    pub pool_pid: Option<i32>,
}

/// The embedded pool's admin token, which it writes beside its secret.
fn token_beside(secret: &Path) -> Option<String> {
    let token = secret.with_extension("admin.token");
    token.exists().then(|| token.display().to_string())
}

/// Where `pool up` records the pool it started.
fn record_path() -> anyhow::Result<PathBuf> {
    carmi_api::coords::record_path(&|k| std::env::var(k).ok())
        .context("nowhere to record the pool: set XDG_STATE_HOME or HOME")
}

fn read_table(path: &Path) -> anyhow::Result<toml::Table> {
    match std::fs::read_to_string(path) {
        Ok(text) => text
            .parse::<toml::Table>()
            .with_context(|| format!("{} is not valid TOML", path.display())),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(toml::Table::new()),
        Err(e) => Err(e).with_context(|| format!("cannot read {}", path.display())),
    }
}

fn write_table(path: &Path, table: &toml::Table) -> anyhow::Result<()> {
    if table.is_empty() {
        return match std::fs::remove_file(path) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                Err(e).with_context(|| format!("cannot remove {}", path.display()))
            }
            _ => Ok(()),
        };
    }
    if let Some(parent) = path.parent() {
        std::fs::create_dir_all(parent)
            .with_context(|| format!("cannot create {}", parent.display()))?;
    }
    let text = toml::to_string(table).context("cannot format the pool's record")?;
    let tmp = path.with_extension(format!("tmp-{}", std::process::id()));
    std::fs::write(&tmp, text)
        .and_then(|()| std::fs::rename(&tmp, path))
        .with_context(|| format!("cannot write {}", path.display()))
}

fn recorded_in(table: &toml::Table) -> Option<Recorded> {
    let pool = table.get("pool")?.as_str()?.to_string();
    let secret = PathBuf::from(table.get("secret")?.as_str()?);
    Some(Recorded {
        pool,
        secret,
        local: table
            .get("local")
            .and_then(|v| v.as_str())
            .map(String::from),
        pool_pid: table
            .get("pool_pid")
            .and_then(|v| v.as_integer())
            .and_then(|p| i32::try_from(p).ok()),
    })
}

/// Whether `pid` is a live `carmi pool serve` process.
fn is_pool_process(pid: i32) -> bool {
    match std::fs::read(format!("/proc/{pid}/cmdline")) {
        Ok(cmd) => {
            let args: Vec<&[u8]> = cmd.split(|b| *b == 0).collect();
            args.windows(2)
                .any(|w| w[0] == b"pool".as_slice() && w[1] == b"serve".as_slice())
        }
        Err(_) => false,
    }
}

fn alive(pid: i32) -> bool {
    // SAFETY: signal 0 only checks that the process exists.
    let exists = unsafe { libc::kill(pid, 0) == 0 };
    exists
        && std::fs::read_to_string(format!("/proc/{pid}/stat"))
            // A zombie has exited; only its parent's wait is missing.
            .map(|s| {
                !s.rsplit_once(')')
                    .is_some_and(|(_, r)| r.trim_start().starts_with('Z'))
            })
            .unwrap_or(false)
}

/// `carmi pool up`.
pub fn up(args: &UpArgs) -> anyhow::Result<()> {
    // Refuse bad options here, not in the background process's log.
    carmi_pool::read_owner_model(&args.owners)?;
    let record = record_path()?;
    if let Some(r) = recorded_in(&read_table(&record)?)
        && let Some(pid) = r.pool_pid
        && alive(pid)
        && is_pool_process(pid)
    {
        bail!(
            "a pool is already up (process {pid}, global RM at {}); stop it with `carmi pool down` first",
            r.pool
        );
    }
    let dir = std::env::temp_dir().join(format!(
        "{DIR_PREFIX}{}-{}",
        std::process::id(),
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or(0)
    ));
    std::fs::create_dir_all(&dir).with_context(|| format!("cannot create {}", dir.display()))?;
    let log_path = dir.join("pool.log");
    let ready = dir.join("ready.toml");
    let log = std::fs::File::create(&log_path)
        .with_context(|| format!("cannot create {}", log_path.display()))?;
    let mut child = serve_command(args, &dir, &ready, log)?
        .spawn()
        .context("cannot start `carmi pool serve`")?;
    let table = wait_ready(&mut child, &ready, &dir, &log_path)?;
    let r = recorded_in(&table).context("the pool's ready file is incomplete")?;
    let dashboard = table.get("dashboard").and_then(|v| v.as_str());
    write_table(&record, &record_of(&r, dashboard, child.id()))?;
    // The global RM's address is in the first line, named, not a bare line
    // of its own before it (scripts read the record file, or `carmi status`).
    let mut out = std::io::stdout().lock();
    writeln!(
        out,
        "pool up: {} hosts; global RM {}, submit-side local RM {}, secret {}",
        args.hosts,
        r.pool,
        r.local.unwrap_or_default(),
        r.secret.display()
    )?;
    if let Some(url) = dashboard {
        // The token in it is read-only (docs/dashboard.md).
        writeln!(out, "dashboard: {url}")?;
    }
    writeln!(
        out,
        "recorded in {}; log in {}; stop it with `carmi pool down`",
        record.display(),
        log_path.display()
    )?;
    Ok(())
}

/// `carmi pool serve` for `args` in the pool's folder `dir`, writing
/// `ready` once up and its output to `log`, in a session of its own.
fn serve_command(
    args: &UpArgs,
    dir: &Path,
    ready: &Path,
    log: std::fs::File,
) -> anyhow::Result<Command> {
    use std::os::unix::process::CommandExt;
    let mut cmd = this_carmi()?;
    cmd.args(["pool", "serve", "--hosts"])
        .arg(args.hosts.to_string())
        .arg("--owners")
        .arg(&args.owners)
        .arg("--speedup")
        .arg(args.speedup.to_string())
        .arg("--seed")
        .arg(args.seed.to_string())
        .arg("--slots")
        .arg(args.slots.to_string())
        .arg("--dir")
        .arg(dir)
        .arg("--ready-file")
        .arg(ready)
        .stdin(Stdio::null())
        .stdout(log.try_clone().context("cannot share the log file")?)
        .stderr(log);
    // SAFETY: setsid and prctl are async-signal-safe and touch no memory.
    unsafe {
        cmd.pre_exec(|| {
            if libc::setsid() < 0 {
                return Err(std::io::Error::last_os_error());
            }
            // Until it is ready, the pool dies with `up` (a Ctrl-C while
            // waiting): it would be recorded nowhere. `serve` clears this
            // before it writes the ready file.
            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGTERM) < 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    Ok(cmd)
}

/// The ready file `serve` (`child`) writes once its pool is up, at most
/// [`UP_TIMEOUT`]. A pool that dies or does not come up in time has its
/// folder `dir` removed, and its log (`log_path`) is shown if it died.
fn wait_ready(
    child: &mut std::process::Child,
    ready: &Path,
    dir: &Path,
    log_path: &Path,
) -> anyhow::Result<toml::Table> {
    let started = Instant::now();
    loop {
        if ready.exists() {
            return read_table(ready);
        }
        if let Some(status) = child.try_wait().context("cannot watch the pool process")? {
            let log = std::fs::read_to_string(log_path).unwrap_or_default();
            let _ = std::fs::remove_dir_all(dir);
            bail!("the pool did not start ({status}):\n{}", log.trim_end());
        }
        if started.elapsed() > UP_TIMEOUT {
            let _ = child.kill();
            let _ = child.wait();
            let _ = std::fs::remove_dir_all(dir);
            bail!("the pool did not come up within {} s", UP_TIMEOUT.as_secs());
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// The record of a pool that is up (`r`, from its ready file, with its
/// `dashboard`), run by the `serve` process `pid`.
fn record_of(r: &Recorded, dashboard: Option<&str>, pid: u32) -> toml::Table {
    let mut t = toml::Table::new();
    t.insert("pool".into(), r.pool.clone().into());
    t.insert("secret".into(), r.secret.display().to_string().into());
    if let Some(token) = token_beside(&r.secret) {
        t.insert("token".into(), token.into());
    }
    t.insert("local".into(), r.local.clone().unwrap_or_default().into());
    t.insert("pool_pid".into(), i64::from(pid as i32).into());
    if let Some(url) = dashboard {
        t.insert("dashboard".into(), url.into());
    }
    t
}

/// `carmi pool down`.
pub fn down() -> anyhow::Result<()> {
    let record = record_path()?;
    let table = read_table(&record)?;
    let Some(r) = recorded_in(&table) else {
        bail!(
            "no pool is recorded in {} (start one with `carmi pool up`)",
            record.display()
        );
    };
    let Some(pid) = r.pool_pid else {
        bail!(
            "the pool in {} was not started by `carmi pool up` (no pool_pid); stop it where it runs",
            record.display()
        );
    };
    if alive(pid) && is_pool_process(pid) {
        // SAFETY: plain signal sends to a process we checked is ours.
        unsafe { libc::kill(pid, libc::SIGTERM) };
        let asked = Instant::now();
        while alive(pid) && asked.elapsed() < DOWN_TIMEOUT {
            std::thread::sleep(Duration::from_millis(20));
        }
        if alive(pid) {
            eprintln!(
                "carmi: the pool process {pid} did not stop within {} s; killing it",
                DOWN_TIMEOUT.as_secs()
            );
            // SAFETY: as above; the negative pid is its session's process group.
            unsafe {
                libc::kill(-pid, libc::SIGKILL);
                libc::kill(pid, libc::SIGKILL);
            }
        }
    }
    if let Some(dir) = r.secret.parent()
        && dir
            .file_name()
            .is_some_and(|n| n.to_string_lossy().starts_with(DIR_PREFIX))
        && dir.exists()
    {
        // After a SIGKILL, job processes may still run in the folder; the
        // sweep kills them (its owner, the serve process, is gone now).
        if let Some(base) = dir.parent() {
            carmi_pool::sweep::sweep_stale(base);
        }
    }
    if let Some(dir) = r.secret.parent()
        && dir
            .file_name()
            .is_some_and(|n| n.to_string_lossy().starts_with(DIR_PREFIX))
        && dir.exists()
    {
        std::fs::remove_dir_all(dir).with_context(|| format!("cannot remove {}", dir.display()))?;
    }
    write_table(&record, &toml::Table::new())?;
    println!("pool stopped (process {pid})");
    Ok(())
}

/// After the supervisor restarted the pool: records its new addresses
/// (`ready`, as the child wrote them) where `up` recorded the pool, unless
/// that record names another pool by now.
pub fn record_restart(ready: &toml::Table) -> anyhow::Result<()> {
    let r = recorded_in(ready).context("the restarted pool's ready file is incomplete")?;
    let record = record_path()?;
    let mut t = read_table(&record)?;
    let ours = recorded_in(&t).and_then(|r| r.pool_pid) == Some(std::process::id() as i32);
    if !ours {
        tracing::warn!(record = %record.display(), "the record names another pool now; the restarted pool's addresses are not recorded");
        return Ok(());
    }
    t.insert("pool".into(), r.pool.clone().into());
    t.insert("secret".into(), r.secret.display().to_string().into());
    if let Some(token) = token_beside(&r.secret) {
        t.insert("token".into(), token.into());
    }
    t.insert("local".into(), r.local.clone().unwrap_or_default().into());
    write_table(&record, &t)?;
    tracing::info!(pool = %r.pool, local = ?r.local, record = %record.display(), "recorded the restarted pool");
    Ok(())
}

/// `carmi pool serve`: runs the embedded pool until SIGTERM or SIGINT (with
/// `--child`), or supervises a child process that does.
pub fn serve(args: &ServeArgs) -> anyhow::Result<()> {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        .with_writer(std::io::stderr)
        .with_ansi(false)
        .init();
    if !args.child {
        return supervise::supervise(args);
    }
    // The daemons run as tasks here, and a panicking task would end alone,
    // unseen, leaving a pool without its global RM or one of its machines.
    // A daemon that panics takes the process down instead, and the
    // supervisor starts the whole pool again.
    let report = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        report(info);
        tracing::error!(
            "a daemon of the embedded pool panicked: {info}; aborting so that the pool is restarted"
        );
        std::process::abort();
    }));
    let owners = carmi_pool::read_owner_model(&args.up.owners)?;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("cannot start the async runtime")?;
    runtime.block_on(async {
        use tokio::signal::unix::{SignalKind, signal};
        // Before the pool starts, so that a `down` during start-up is not lost.
        let mut term = signal(SignalKind::terminate()).context("cannot handle SIGTERM")?;
        let mut int = signal(SignalKind::interrupt()).context("cannot handle SIGINT")?;
        let opts = PoolOptions {
            hosts: args.up.hosts,
            owners,
            speedup: args.up.speedup,
            seed: args.up.seed,
            slots_per_host: args.up.slots,
            dir: Some(args.dir.clone()),
            // Removed here after shutdown, and by `up` after a failed start
            // (once it has shown the log that lives in it).
            keep_dir: true,
            handle_signals: false,
            http: Some("127.0.0.1:0".into()),
            ..PoolOptions::default()
        };
        let pool = tokio::select! {
            p = EmbeddedPool::start(opts) => Some(p?),
            _ = term.recv() => None,
            _ = int.recv() => None,
        };
        let Some(pool) = pool else {
            // Stopped while starting (`up` interrupted): the half-started
            // parts stop as they are dropped; the folder goes with them.
            let _ = std::fs::remove_dir_all(&args.dir);
            return Ok(());
        };
        // The parent-death signal stays: the pool stops with its supervisor,
        // which itself outlives `up` once it has seen the ready file.
        let mut t = toml::Table::new();
        t.insert("pool".into(), pool.global_addr().to_string().into());
        t.insert(
            "secret".into(),
            pool.secret_file().display().to_string().into(),
        );
        t.insert(
            "token".into(),
            pool.token_file().display().to_string().into(),
        );
        t.insert("local".into(), pool.submit_addr().to_string().into());
        t.insert("pool_pid".into(), i64::from(std::process::id()).into());
        if let Some(url) = pool.dashboard() {
            t.insert("dashboard".into(), url.into());
        }
        // Written beside and renamed, so `up` never reads half a file.
        let tmp = args.ready_file.with_extension("tmp");
        let written = std::fs::write(&tmp, toml::to_string(&t)?)
            .and_then(|()| std::fs::rename(&tmp, &args.ready_file));
        if let Err(e) = written {
            pool.shutdown().await;
            let _ = std::fs::remove_dir_all(&args.dir);
            return Err(e).with_context(|| format!("cannot write {}", args.ready_file.display()));
        }
        tokio::select! {
            _ = term.recv() => tracing::info!("SIGTERM: stopping the pool"),
            _ = int.recv() => tracing::info!("SIGINT: stopping the pool"),
        }
        pool.shutdown().await;
        std::fs::remove_dir_all(&args.dir)
            .with_context(|| format!("cannot remove {}", args.dir.display()))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn recorded_keys_are_read_back() {
        let t: toml::Table =
            "pool = \"127.0.0.1:1\"\nsecret = \"/s\"\nlocal = \"127.0.0.1:2\"\npool_pid = 7\nother = 1\n"
                .parse()
                .unwrap();
        let r = recorded_in(&t).unwrap();
        assert_eq!(r.pool, "127.0.0.1:1");
        assert_eq!(r.secret, PathBuf::from("/s"));
        assert_eq!(r.local.as_deref(), Some("127.0.0.1:2"));
        assert_eq!(r.pool_pid, Some(7));
        let t: toml::Table = "other = 1\n".parse().unwrap();
        assert!(recorded_in(&t).is_none());
    }
}
