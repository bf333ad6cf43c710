//! The embedded pool's start-up: the pool's secret and tokens, the global
//! RM (with its dashboard), one local RM per host with its folder,
//! configuration file and varied machine ad, the submit machine, the wait
//! for every registration, the owner driver and the signal handler.
//!
//! Kept apart from `pool.rs` (the pool's handle and its clean-up) so that
//! each file stays readable.

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

use super::{
    EmbeddedPool, Parts, PoolHost, PoolOptions, READY_TIMEOUT, SUBMIT_HOST, TOKEN_LIFETIME_S, io,
    stop,
};
use crate::Error;
use crate::driver::{DriveReport, drive};
use owner_model::host_name;

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

/// Starts the pool in its folder `dir`: [`EmbeddedPool::start`] without
/// the folder's claim and clean-up.
pub(super) async fn start_in(opts: &PoolOptions, dir: &Path) -> Result<EmbeddedPool, Error> {
    let secret_file = dir.join("pool.secret");
    write_secret(&secret_file)?;
    // Tokens as in any pool, made here: a daemon token per machine, an
    // admin token for the user, the key kept in memory only.
    let key = SigningKey::generate().map_err(|e| Error::BadOptions(e.to_string()))?;
    let (admin_token, token_file) = admin_token(&key, &secret_file)?;
    let secret = Secret::from_file(&secret_file)?.with_token(Some(admin_token.clone()));
    let (global_addr, dashboard, (global_stop, global)) =
        start_global(opts, dir, &secret, &key).await?;
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
    let (daemons, hosts) = start_hosts(&common, opts).await?;
    let settings = local_settings(&common, SUBMIT_HOST, 0, &[])?;
    let submit = Daemon::start(settings)
        .await
        .map_err(|error| Error::Local {
            host: SUBMIT_HOST.into(),
            error: Box::new(error),
        })?;
    let submit_addr = submit.app_addr();

    wait_ready(&global_addr.to_string(), &secret, opts.hosts + 1).await?;

    let (driver_stop, driver) = start_driver(opts, &daemons);
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
    let signals = opts.handle_signals.then(|| watch_signals(&parts)).flatten();
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

/// The user's admin token, signed by `key`, and the file beside
/// `secret_file` it is written to.
fn admin_token(key: &SigningKey, secret_file: &Path) -> Result<(String, PathBuf), Error> {
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
    Ok((admin_token, token_file))
}

/// The global RM, running: its address, its dashboard's (with a token),
/// and what stops it and its task.
async fn start_global(
    opts: &PoolOptions,
    dir: &Path,
    secret: &Secret,
    key: &SigningKey,
) -> Result<GlobalRunning, Error> {
    let mut config = ServerConfig::new(secret.clone(), dir.join("global"));
    config.router.heartbeat = opts.heartbeat;
    let authority = Authority::with_key(
        SigningKey::from_text(&key.to_text()).expect("a key reads back"),
        &dir.join("global"),
    );
    config.auth = Some(Arc::new(authority));
    let (server, dashboard) = bind_global(config, opts.http.as_deref(), key).await?;
    let global_addr = server.local_addr()?;
    let (global_stop, global_stop_rx) = oneshot::channel::<()>();
    let global = tokio::spawn(server.run(async move {
        let _ = global_stop_rx.await;
    }));
    Ok((global_addr, dashboard, (global_stop, global)))
}

/// A running global RM: its address, its dashboard's, what stops it, its task.
type GlobalRunning = (
    SocketAddr,
    Option<String>,
    (
        oneshot::Sender<()>,
        JoinHandle<Result<(), carmi_global::Error>>,
    ),
);

/// The pool's hosts' local RMs, each with its varied machine ad, started.
async fn start_hosts(
    common: &Common<'_>,
    opts: &PoolOptions,
) -> Result<(Vec<Arc<Daemon>>, Vec<PoolHost>), Error> {
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
        let settings = local_settings(common, &name, opts.slots_per_host, &attrs)?;
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
    Ok((daemons, hosts))
}

/// The owner driver, playing the pool's owner model to `daemons`, and what stops it.
fn start_driver(
    opts: &PoolOptions,
    daemons: &[Arc<Daemon>],
) -> (watch::Sender<bool>, JoinHandle<DriveReport>) {
    let (driver_stop, driver_stop_rx) = watch::channel(false);
    let targets = daemons.to_vec();
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
    (driver_stop, driver)
}

/// SIGINT and SIGTERM shut the pool down, then exit the process. Registered
/// here, not in the task: a signal right after `start` returns must already
/// find the handler.
fn watch_signals(parts: &Arc<Mutex<Option<Parts>>>) -> Option<JoinHandle<()>> {
    use tokio::signal::unix::{SignalKind, signal};
    match (
        signal(SignalKind::interrupt()),
        signal(SignalKind::terminate()),
    ) {
        (Ok(int), Ok(term)) => Some(tokio::spawn(on_signal(parts.clone(), int, term))),
        _ => {
            tracing::warn!("cannot watch SIGINT/SIGTERM; the pool is cleaned up only by shutdown");
            None
        }
    }
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
