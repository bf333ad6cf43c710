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
use carmi_api::token::{Grant, Power, SigningKey, now_unix};
use carmi_global::server::{Authority, Server, ServerConfig};
use carmi_local::config::{Cli, Settings};
use carmi_local::daemon::Daemon;
use clap::Parser;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use tokio::sync::{oneshot, watch};
use tokio::task::JoinHandle;
use tokio::time::Instant;

use crate::driver::{DriveReport, drive};
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

/// The varied machine ads: a log-uniform `Speed` in 0.5..2.0 (as many
/// machines half as fast as twice as fast), benchmark scores in proportion to
/// it, and a memory size.
fn host_ads(hosts: usize, seed: u64) -> Vec<(f64, i64, i64, i64)> {
    let mut rng = ChaCha8Rng::seed_from_u64(seed ^ 0x0005_EED0_FAD5);
    (0..hosts)
        .map(|_| {
            let speed = (0.5 * 4f64.powf(rng.random::<f64>()) * 100.0).round() / 100.0;
            // Scores of a machine of speed 1 on this benchmark's scale.
            let mips = (3000.0 * speed).round() as i64;
            let kflops = (1_500_000.0 * speed).round() as i64;
            let memory = [2048, 4096, 8192, 16384][rng.random_range(0..4)];
            (speed, mips, kflops, memory)
        })
        .collect()
}

/// The TOML configuration of one embedded local RM.
fn local_config(
    name: &str,
    slots: u32,
    work_dir: &Path,
    kill_grace: Duration,
    attrs: &[(&str, toml::Value)],
    minute: f64,
) -> String {
    let mut t = toml::Table::new();
    t.insert("name".into(), name.into());
    t.insert("slots".into(), i64::from(slots).into());
    t.insert("work_dir".into(), work_dir.display().to_string().into());
    t.insert(
        "kill_grace_ms".into(),
        i64::try_from(kill_grace.as_millis())
            .unwrap_or(i64::MAX)
            .into(),
    );
    let mut a = toml::Table::new();
    for (n, v) in attrs {
        a.insert((*n).into(), v.clone());
    }
    t.insert("attributes".into(), a.into());
    let mut policy = toml::Table::new();
    policy.insert("minute".into(), minute.into());
    t.insert("policy".into(), policy.into());
    let mut owner = toml::Table::new();
    owner.insert("source".into(), "simulated".into());
    t.insert("owner".into(), owner.into());
    toml::to_string(&t).expect("a TOML table always serializes")
}

/// What every embedded local RM's configuration shares.
struct Common<'a> {
    dir: &'a Path,
    global: SocketAddr,
    secret: &'a Path,
    /// The pool's signing key: each local RM gets a daemon token for its machine.
    key: &'a SigningKey,
    kill_grace: Duration,
    /// Seconds in a policy minute.
    minute: f64,
}

/// Writes a local RM's config file and resolves it as `carmi-local` would.
fn local_settings(
    c: &Common,
    name: &str,
    slots: u32,
    attrs: &[(&str, toml::Value)],
) -> Result<Settings, Error> {
    let work_dir = c.dir.join(name);
    std::fs::create_dir_all(&work_dir).map_err(io("cannot create host folder", &work_dir))?;
    let path = work_dir.join("local.toml");
    let text = local_config(name, slots, &work_dir, c.kill_grace, attrs, c.minute);
    std::fs::write(&path, text).map_err(io("cannot write", &path))?;
    // Parsed, not built as a struct: options carmi-local adds later keep
    // their defaults here without a change.
    let (global, secret) = (c.global.to_string(), c.secret.display().to_string());
    let config = path.display().to_string();
    let args = [
        "carmi-local",
        "--global",
        &global,
        "--secret",
        &secret,
        "--config",
        &config,
        "--listen",
        "127.0.0.1:0",
    ];
    let cli = Cli::try_parse_from(args).map_err(|e| Error::BadOptions(format!("{name}: {e}")))?;
    let mut s = Settings::from_cli(&cli).map_err(|e| Error::Local {
        host: name.to_string(),
        error: Box::new(e.into()),
    })?;
    s.benchmark = false;
    // A personal pool runs its jobs as the user who started it, root too
    // (docs/security.md, "Isolated jobs"): they read and write that user's files.
    s.accounts = carmi_local::isolation::AccountsConfig::Own;
    let grant = Grant {
        identity: name.to_string(),
        power: Power::Daemon,
        machine: Some(name.to_string()),
        lifetime_s: TOKEN_LIFETIME_S,
    };
    let (token, _) = c
        .key
        .issue(&grant, now_unix())
        .map_err(|e| Error::BadOptions(format!("{name}: {e}")))?;
    s.token = Some(token);
    Ok(s)
}

/// The global RM on loopback, serving its dashboard on `addr` (if any,
/// checking tokens with its authority), and the dashboard's address with a
/// read-only token signed by `key`.
async fn bind_global(
    config: ServerConfig,
    addr: Option<&str>,
    key: &SigningKey,
) -> Result<(Server, Option<String>), Error> {
    let server = Server::bind("127.0.0.1:0", config).await?;
    let (Some(addr), Some(authority)) = (addr, server.authority()) else {
        return Ok((server, None));
    };
    let check: carmi_global::dashboard::TokenCheck = Arc::new(move |t| authority.check_read(t));
    let d = carmi_global::dashboard::Dashboard::bind(addr, Some(check))
        .await
        .map_err(Error::BadOptions)?;
    // Read-only: the address may end up in a browser's history.
    let grant = Grant {
        identity: "dashboard".into(),
        power: Power::Read,
        machine: None,
        lifetime_s: TOKEN_LIFETIME_S,
    };
    let (read, _) =
        (key.issue(&grant, now_unix())).map_err(|e| Error::BadOptions(e.to_string()))?;
    let page = (d.url()).map_err(|e| Error::BadOptions(format!("dashboard: {e}")))?;
    let url = format!("{page}?token={read}");
    Ok((server.with_dashboard(d), Some(url)))
}

async fn start_in(opts: &PoolOptions, dir: &Path) -> Result<EmbeddedPool, Error> {
    let secret_file = dir.join("pool.secret");
    write_secret(&secret_file)?;
    // Tokens as in any pool, made here: a daemon token per machine, an
    // admin token for the user, the key kept in memory only.
    let key = SigningKey::generate().map_err(|e| Error::BadOptions(e.to_string()))?;
    let user = std::env::var("USER").unwrap_or_else(|_| "admin".into());
    let grant = Grant {
        identity: user,
        power: Power::Admin,
        machine: None,
        lifetime_s: TOKEN_LIFETIME_S,
    };
    let (admin_token, _) = key
        .issue(&grant, now_unix())
        .map_err(|e| Error::BadOptions(e.to_string()))?;
    let token_file = secret_file.with_extension("admin.token");
    // Replaced, not refused: a pool restarted in its folder (`carmi pool up`'s
    // supervisor) finds the token of its previous life, signed by a key that
    // died with it. The secret just created anew says the folder is ours.
    carmi_api::files::write_private(&token_file, &format!("{admin_token}\n"), true)
        .map_err(|e| Error::BadOptions(e.to_string()))?;
    let secret = Secret::from_file(&secret_file)?.with_token(Some(admin_token.clone()));

    let mut config = ServerConfig::new(secret.clone(), dir.join("global"));
    config.router.heartbeat = opts.heartbeat;
    let authority = Authority::with_key(
        SigningKey::from_text(&key.to_text()).expect("a key reads back"),
        &dir.join("global"),
    );
    config.auth = Some(Arc::new(authority));
    let (server, dashboard) = bind_global(config, opts.http.as_deref(), &key).await?;
    let global_addr = server.local_addr()?;
    let (global_stop, global_stop_rx) = oneshot::channel::<()>();
    let global = tokio::spawn(server.run(async move {
        let _ = global_stop_rx.await;
    }));
    // Parts that exist so far stop if a later step fails: dropping a Daemon
    // stops it, dropping `global_stop` stops the global RM.
    let common = Common {
        dir,
        global: global_addr,
        secret: &secret_file,
        key: &key,
        kill_grace: opts.kill_grace,
        minute: 60.0 / opts.speedup,
    };
    let ads = host_ads(opts.hosts, opts.seed);
    let mut daemons = Vec::with_capacity(opts.hosts);
    let mut hosts = Vec::with_capacity(opts.hosts);
    for (i, &(speed, mips, kflops, memory)) in ads.iter().enumerate() {
        let name = host_name(i);
        let attrs = [
            ("Memory", toml::Value::Integer(memory)),
            ("Mips", toml::Value::Integer(mips)),
            ("KFlops", toml::Value::Integer(kflops)),
            ("Speed", toml::Value::Float(speed)),
        ];
        let settings = local_settings(&common, &name, opts.slots_per_host, &attrs)?;
        let d = Daemon::start(settings)
            .await
            .map_err(|error| Error::Local {
                host: name.clone(),
                error: Box::new(error),
            })?;
        hosts.push(PoolHost {
            name,
            app_addr: d.app_addr(),
            work_dir: d.work_dir().to_path_buf(),
            slots: d.slots(),
            memory_mib: memory,
            mips,
            kflops,
            speed,
        });
        daemons.push(Arc::new(d));
    }
    let settings = local_settings(&common, SUBMIT_HOST, 0, &[])?;
    let submit = Daemon::start(settings)
        .await
        .map_err(|error| Error::Local {
            host: SUBMIT_HOST.into(),
            error: Box::new(error),
        })?;
    let submit_addr = submit.app_addr();

    wait_ready(&global_addr.to_string(), &secret, opts.hosts + 1).await?;

    let (driver_stop, driver_stop_rx) = watch::channel(false);
    let targets = daemons.clone();
    let stream = opts.owners.stream(opts.hosts, opts.seed);
    let speedup = opts.speedup;
    let driver = tokio::spawn(async move {
        let r = drive(stream, &targets, speedup, Instant::now(), driver_stop_rx).await;
        tracing::debug!(
            delivered = r.delivered,
            refused = r.refused,
            "owner driver stopped"
        );
        r
    });
    tracing::info!(
        hosts = opts.hosts,
        global = %global_addr,
        submit = %submit_addr,
        dir = %dir.display(),
        "embedded pool up"
    );
    let parts = Arc::new(Mutex::new(Some(Parts {
        dir: dir.to_path_buf(),
        keep_dir: opts.keep_dir,
        daemons,
        submit,
        driver_stop,
        driver,
        global_stop,
        global,
    })));
    // Registered here, not in the task: a signal right after `start`
    // returns must already find the handler.
    let signals = if opts.handle_signals {
        use tokio::signal::unix::{SignalKind, signal};
        match (
            signal(SignalKind::interrupt()),
            signal(SignalKind::terminate()),
        ) {
            (Ok(int), Ok(term)) => Some(tokio::spawn(on_signal(parts.clone(), int, term))),
            _ => {
                tracing::warn!(
                    "cannot watch SIGINT/SIGTERM; the pool is cleaned up only by shutdown"
                );
                None
            }
        }
    } else {
        None
    };
    Ok(EmbeddedPool {
        parts,
        global_addr,
        submit_addr,
        secret_file,
        token_file,
        admin_token,
        dir: dir.to_path_buf(),
        hosts,
        signals,
        dashboard,
    })
}

/// Waits until `machines` machines are registered with the global RM.
async fn wait_ready(addr: &str, secret: &Secret, machines: usize) -> Result<(), Error> {
    let deadline = Instant::now() + READY_TIMEOUT;
    loop {
        let last = match carmi_api::admin::pool_status(addr, secret).await {
            Ok(m) if m.len() >= machines => return Ok(()),
            Ok(m) => format!("{} of {machines} machines registered", m.len()),
            Err(e) => e.to_string(),
        };
        if Instant::now() >= deadline {
            return Err(Error::NotReady(format!(
                "after {} s: {last}",
                READY_TIMEOUT.as_secs()
            )));
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// A fresh pool secret, readable by its owner only from the moment it exists.
fn write_secret(path: &Path) -> Result<(), Error> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)
        .map_err(io("cannot create", path))?;
    writeln!(f, "{}", Secret::generate_text()).map_err(io("cannot write", path))
}

async fn on_signal(
    parts: Arc<Mutex<Option<Parts>>>,
    mut int: tokio::signal::unix::Signal,
    mut term: tokio::signal::unix::Signal,
) {
    tokio::select! {
        _ = int.recv() => {}
        _ = term.recv() => {}
    }
    tracing::info!("signal: stopping the embedded pool");
    let p = parts.lock().ok().and_then(|mut p| p.take());
    if let Some(p) = p {
        stop(p).await;
    }
    std::process::exit(130);
}

#[cfg(test)]
#[path = "pool_tests.rs"]
mod tests;
