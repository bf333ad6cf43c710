//! The embedded pool: a global RM and N local RMs as tasks of this process.
//!
//! Each local RM gets its own folder and TOML configuration file under the
//! pool's folder (the same file format an installed `carmi-local` reads, so
//! the owner policy's keys apply as they would on a real machine), the
//! start-up benchmark is off for a fast start, and the machine ad varies from
//! host to host (`Memory`, `Mips`, `KFlops`, and a relative `Speed` between
//! 0.5 and 2.0), deterministically from the seed.
//!
//! Applications connect to an extra local RM, `submit`, which has no job
//! slots (a submit machine, as in HTCondor: it runs masters' connections,
//! not jobs); `carmi status` lists it apart from the pool's hosts.
//!
//! Clean-up: [`EmbeddedPool::shutdown`] stops the owner driver, then every
//! local RM (each kills its processes), then the global RM, then removes the
//! folder. Dropped without shutdown, the pool runs the same shutdown in the
//! background and removes its folder at once (best effort: a runtime that is
//! itself shutting down kills the processes through the local RMs' drop
//! guards). With `handle_signals`, SIGINT and SIGTERM shut the pool down and
//! then exit the process with status 130. After a SIGKILL nothing runs; the
//! next pool started on the machine removes the stale folder and kills what
//! still runs in it (see [`crate::sweep`]).

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use carmi_api::handshake::Secret;
use carmi_local::daemon::Daemon;
use rand::Rng;
use tokio::sync::{oneshot, watch};
use tokio::task::JoinHandle;

use crate::driver::DriveReport;
use crate::{Error, sweep};
use owner_model::OwnerModel;

pub use owner_model::host_name;

/// Name of the submit-side local RM.
pub const SUBMIT_HOST: &str = "submit";

/// Lifetime of the tokens an embedded pool makes: a week, longer than any
/// run of it (its key dies with it).
const TOKEN_LIFETIME_S: u64 = 7 * 24 * 3600;

/// How long [`EmbeddedPool::start`] waits for every local RM to register.
const READY_TIMEOUT: Duration = Duration::from_secs(30);

/// What pool to start.
#[derive(Clone, Debug)]
pub struct PoolOptions {
    /// Number of pool machines (`host01`, `host02`, ...).
    pub hosts: usize,
    /// How their owners behave.
    pub owners: OwnerModel,
    /// Virtual seconds of owner behaviour per wall second.
    pub speedup: f64,
    /// Seed for the owners and the machine ads.
    pub seed: u64,
    /// Job slots per machine.
    pub slots_per_host: u32,
    /// The pool's folder (created if missing); `None`: a fresh one under the
    /// system's temporary directory. Removed at shutdown unless `keep_dir`.
    pub dir: Option<PathBuf>,
    /// Keep the folder (logs, sandboxes) after shutdown.
    pub keep_dir: bool,
    /// Heartbeat period the global RM asks of the local RMs.
    pub heartbeat: Duration,
    /// SIGTERM -> SIGKILL grace period when a job process is killed.
    pub kill_grace: Duration,
    /// Shut the pool down and exit the process (status 130) on SIGINT or
    /// SIGTERM. Tokio keeps the handler for the life of the process, so
    /// programs that handle those signals themselves turn this off.
    pub handle_signals: bool,
    /// Serve the global RM's web dashboard on this `HOST:PORT` (loopback;
    /// port 0 picks one): [`EmbeddedPool::dashboard`] then says where.
    pub http: Option<String>,
}

impl Default for PoolOptions {
    fn default() -> Self {
        PoolOptions {
            hosts: 16,
            owners: OwnerModel::None,
            speedup: 1.0,
            seed: 0,
            slots_per_host: 1,
            dir: None,
            keep_dir: false,
            heartbeat: Duration::from_millis(1000),
            kill_grace: Duration::from_secs(1),
            handle_signals: true,
            http: None,
        }
    }
}

/// One machine of the pool and its advertised attributes.
#[derive(Clone, Debug, PartialEq)]
pub struct PoolHost {
    /// Machine name (`host01`, ...).
    pub name: String,
    /// Where its local RM accepts application connections.
    pub app_addr: SocketAddr,
    /// Its local RM's folder.
    pub work_dir: PathBuf,
    /// Job slots.
    pub slots: u32,
    /// Advertised `Memory` in MiB.
    pub memory_mib: i64,
    /// Advertised `Mips`.
    pub mips: i64,
    /// Advertised `KFlops`.
    pub kflops: i64,
    /// Advertised `Speed`: relative to an average machine (0.5 to 2.0).
    pub speed: f64,
}

/// The running parts; taken out exactly once, by shutdown, drop or a signal.
struct Parts {
    dir: PathBuf,
    keep_dir: bool,
    daemons: Vec<Arc<Daemon>>,
    submit: Daemon,
    driver_stop: watch::Sender<bool>,
    driver: JoinHandle<DriveReport>,
    global_stop: oneshot::Sender<()>,
    global: JoinHandle<Result<(), carmi_global::Error>>,
}

/// A running embedded pool. See the module documentation.
pub struct EmbeddedPool {
    parts: Arc<Mutex<Option<Parts>>>,
    global_addr: SocketAddr,
    submit_addr: SocketAddr,
    secret_file: PathBuf,
    token_file: PathBuf,
    admin_token: String,
    dir: PathBuf,
    hosts: Vec<PoolHost>,
    signals: Option<JoinHandle<()>>,
    dashboard: Option<String>,
}

impl EmbeddedPool {
    /// Starts the global RM, the local RMs and the owner driver, and returns
    /// once every local RM has registered with the global RM.
    pub async fn start(opts: PoolOptions) -> Result<EmbeddedPool, Error> {
        check(&opts)?;
        let dir = match &opts.dir {
            Some(d) => d.clone(),
            None => fresh_dir()?,
        };
        std::fs::create_dir_all(&dir).map_err(io("cannot create pool folder", &dir))?;
        let dir = std::fs::canonicalize(&dir).map_err(io("cannot resolve pool folder", &dir))?;
        sweep::claim(&dir).map_err(io("cannot write the owner file in", &dir))?;
        // Pools whose process was killed left their folder (and maybe job
        // processes) behind; this is the first chance to clean up after them.
        sweep::sweep_stale(&std::env::temp_dir());
        match start_in(&opts, &dir).await {
            Ok(pool) => Ok(pool),
            Err(e) => {
                if !opts.keep_dir {
                    let _ = std::fs::remove_dir_all(&dir);
                }
                Err(e)
            }
        }
    }

    /// The global RM's address.
    pub fn global_addr(&self) -> SocketAddr {
        self.global_addr
    }

    /// The pool's secret file.
    pub fn secret_file(&self) -> &Path {
        &self.secret_file
    }

    /// The dashboard's address with a read-only token that the page turns
    /// into its cookie (`https://127.0.0.1:PORT/?token=...`), when
    /// [`PoolOptions::http`] asked for one.
    pub fn dashboard(&self) -> Option<&str> {
        self.dashboard.as_deref()
    }

    /// The file of the admin token the pool made for its user (mode 0600,
    /// beside the secret): `carmi` presents it to the global RM.
    pub fn token_file(&self) -> &Path {
        &self.token_file
    }

    /// The secret presenting the admin token, for admin requests to the global RM.
    pub fn admin_secret(&self) -> Result<Secret, Error> {
        Ok(Secret::from_file(&self.secret_file)?.with_token(Some(self.admin_token.clone())))
    }

    /// The submit-side local RM, where applications and `carmi` commands connect.
    pub fn submit_addr(&self) -> SocketAddr {
        self.submit_addr
    }

    /// The pool's folder.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The pool machines, `host01` first.
    pub fn hosts(&self) -> &[PoolHost] {
        &self.hosts
    }

    /// Reports owner activity on host `host` (0 for `host01`) now, beside
    /// the model. False if there is no such host or the pool is stopping.
    pub async fn owner_event(&self, host: usize, event: carmi_api::msg::OwnerEvent) -> bool {
        let daemon = {
            let parts = self.parts.lock().expect("pool parts lock poisoned");
            parts.as_ref().and_then(|p| p.daemons.get(host).cloned())
        };
        match daemon {
            Some(d) => d.owner_event(event).await,
            None => false,
        }
    }

    /// Stops the owners, every local RM (which kill their processes) and the
    /// global RM, and removes the pool's folder.
    pub async fn shutdown(mut self) {
        if let Some(s) = self.signals.take() {
            s.abort();
        }
        let parts = self.parts.lock().expect("pool parts lock poisoned").take();
        if let Some(p) = parts {
            stop(p).await;
        }
    }
}

impl Drop for EmbeddedPool {
    fn drop(&mut self) {
        if let Some(s) = self.signals.take() {
            s.abort();
        }
        let Some(p) = self.parts.lock().ok().and_then(|mut p| p.take()) else {
            return;
        };
        let (dir, keep) = (p.dir.clone(), p.keep_dir);
        match tokio::runtime::Handle::try_current() {
            Ok(h) => {
                h.spawn(stop(p));
            }
            // No runtime to stop them in: dropping the parts drops every
            // local RM, whose process guards kill what they started.
            Err(_) => drop(p),
        }
        // Now, not in the task: a runtime being torn down never runs it.
        if !keep {
            let _ = std::fs::remove_dir_all(&dir);
        }
    }
}

async fn stop(p: Parts) {
    let _ = p.driver_stop.send(true);
    let _ = p.driver.await;
    let mut stopping = tokio::task::JoinSet::new();
    for d in p.daemons {
        match Arc::try_unwrap(d) {
            Ok(d) => {
                stopping.spawn(d.shutdown());
            }
            // Someone still holds it (an `owner_event` in flight): dropping
            // our handle stops it once theirs goes too.
            Err(d) => drop(d),
        }
    }
    stopping.spawn(p.submit.shutdown());
    while stopping.join_next().await.is_some() {}
    let _ = p.global_stop.send(());
    match p.global.await {
        Ok(Ok(())) => {}
        Ok(Err(e)) => tracing::warn!(error = %e, "the embedded global RM stopped with an error"),
        Err(e) => tracing::warn!(error = %e, "the embedded global RM task failed"),
    }
    if !p.keep_dir
        && let Err(e) = std::fs::remove_dir_all(&p.dir)
        && e.kind() != std::io::ErrorKind::NotFound
    {
        tracing::warn!(dir = %p.dir.display(), error = %e, "cannot remove the pool folder");
    }
    tracing::info!("embedded pool stopped");
}

fn check(opts: &PoolOptions) -> Result<(), Error> {
    let bad = |s: String| Err(Error::BadOptions(s));
    if opts.hosts == 0 || opts.hosts > 999 {
        return bad(format!("hosts must be 1 to 999, got {}", opts.hosts));
    }
    if !(opts.speedup.is_finite() && opts.speedup > 0.0) {
        return bad(format!("speedup must be positive, got {}", opts.speedup));
    }
    if opts.slots_per_host == 0 {
        return bad("slots_per_host must be at least 1".into());
    }
    if opts.heartbeat.is_zero() {
        return bad("heartbeat must be positive".into());
    }
    Ok(opts.owners.check()?)
}

fn io(what: &'static str, path: &Path) -> impl FnOnce(std::io::Error) -> Error {
    let path = path.to_path_buf();
    move |source| Error::Io { what, path, source }
}

/// A new, empty folder under the temporary directory, named after this process.
fn fresh_dir() -> Result<PathBuf, Error> {
    let base = std::env::temp_dir();
    let mut rng = rand::rng();
    for _ in 0..16 {
        let d = base.join(format!(
            "{}{}-{:08x}",
            sweep::DIR_PREFIX,
            std::process::id(),
            rng.random::<u32>()
        ));
        match std::fs::create_dir(&d) {
            Ok(()) => return Ok(d),
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
            Err(source) => {
                return Err(Error::Io {
                    what: "cannot create pool folder in",
                    path: base,
                    source,
                });
            }
        }
    }
    Err(Error::NotReady(format!(
        "no free folder name under {}",
        base.display()
    )))
}

#[path = "pool_start.rs"]
mod start;
use start::start_in;
