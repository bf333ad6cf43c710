//! `carmi-global`: the CARMI global resource manager daemon.
//!
//! Prints `listening on HOST:PORT` as the first line on stdout once it
//! accepts connections, then `dashboard on https://HOST:PORT/` with `--http`
//! (logs go to stderr), and stops cleanly on SIGTERM or SIGINT.

use std::io::{IsTerminal, Write};
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{Context, bail};
use carmi_api::frame::FrameDeadline;
use carmi_api::handshake::Secret;
use carmi_global::router::RouterConfig;
use carmi_global::server::{ConnLimits, Server, ServerConfig};
use carmi_global::staging::StagingConfig;
use clap::Parser;
use tracing_subscriber::EnvFilter;

/// The CARMI global resource manager.
#[derive(Parser, Debug)]
#[command(name = "carmi-global", version, about)]
struct Args {
    /// Address to listen on, HOST:PORT (port 0 picks a free port).
    #[arg(long, value_name = "HOST:PORT")]
    listen: String,
    /// File holding the pool's shared secret (at least 16 bytes) [default:
    /// pool.secret in the pool's directory, where `carmi pool init` writes
    /// it: $CARMI_DIR, else /etc/carmi for root, else ~/.config/carmi].
    #[arg(long, value_name = "FILE")]
    secret: Option<PathBuf>,
    /// The pool's signing key (`carmi pool init` writes it, mode 0600): with
    /// it every connection must present a token and is held to its power
    /// [default: the `.key` file beside the secret, which `carmi pool init`
    /// writes]. Required, unless --insecure.
    #[arg(long, value_name = "FILE")]
    pool_key: Option<PathBuf>,
    /// Run without a signing key: whoever holds the pool secret is then an
    /// admin of the pool (every user and machine can remove every job).
    /// For a development pool on one machine only.
    #[arg(long, conflicts_with = "pool_key")]
    insecure: bool,
    /// Directory for executables and other state (created if missing).
    #[arg(long, value_name = "DIR")]
    state_dir: PathBuf,
    /// Heartbeat period asked of local RMs, in milliseconds.
    #[arg(long, value_name = "N", default_value_t = 1000)]
    heartbeat_ms: u64,
    /// A machine silent for this many heartbeat periods is declared lost.
    #[arg(long, value_name = "N", default_value_t = 3)]
    missed_heartbeats: u32,
    /// Every machine (three at least) silent at once is taken for this
    /// daemon's own cut from the network: none is declared lost for it for
    /// this many seconds (0: never taken for a cut; a machine is lost after
    /// its missed heartbeats, whatever the others do).
    #[arg(long, value_name = "S", default_value_t = 600)]
    cut_off_limit_s: u64,
    /// Cap on the bandwidth of executable staging sent from this daemon's
    /// store, in MB/s (10^6 bytes); unlimited if not given.
    #[arg(long, value_name = "MB_PER_S")]
    stage_link_rate: Option<f64>,
    /// How many fetches one holder of an executable (a local RM or the
    /// store) serves at once: copies spread as a tree of this fan-out; 1 (a
    /// chain, every copy at the full link rate) suits pools up to a few
    /// hundred machines, 2 (a binary tree) larger ones.
    #[arg(long, value_name = "N", default_value_t = 1)]
    stage_fanout: u32,
    /// Seconds a local RM has to report a fetch of an executable it was
    /// directed to; past them its source's slot is given back to others.
    #[arg(long, value_name = "S", default_value_t = 600)]
    stage_fetch_timeout_s: u64,
    /// Most connections open at once (local RMs, tools, and clients still in
    /// their handshake); lowered to fit the file-descriptor limit [default:
    /// 8192].
    #[arg(long, value_name = "N")]
    max_connections: Option<usize>,
    /// A frame started after the handshake must arrive whole within this
    /// many seconds, plus one per MiB of its length; the connection is
    /// closed otherwise (idle connections between frames are not affected).
    #[arg(long, value_name = "S", default_value_t = FrameDeadline::DEFAULT.base.as_secs())]
    frame_timeout_s: u64,
    /// The `carmi-local` that pilots run (`carmi alloc`) [default: the one
    /// beside this executable]. It must be reachable at this path on the
    /// batch system's nodes.
    #[arg(long, value_name = "FILE")]
    pilot_local: Option<PathBuf>,
    /// Where pilots connect to this daemon, HOST:PORT [default: the address
    /// it listens on]; give a name the batch nodes can reach.
    #[arg(long, value_name = "HOST:PORT")]
    pilot_global: Option<String>,
    /// Serve the web dashboard (read-only) over HTTPS on HOST:PORT (port 0
    /// picks one; the certificate is made at start); off by default. With
    /// --pool-key every request needs a `read` token; without it only a
    /// loopback address is accepted.
    #[arg(long, value_name = "HOST:PORT")]
    http: Option<String>,
    /// The dashboard's certificate (PEM) [default: dashboard.crt beside the
    /// secret, which `carmi pool init` makes; without it, one is made in
    /// memory at each start].
    #[arg(long, value_name = "FILE", requires = "http_key")]
    http_cert: Option<PathBuf>,
    /// The dashboard certificate's private key (PEM, mode 0600) [default:
    /// dashboard.key beside the secret].
    #[arg(long, value_name = "FILE", requires = "http_cert")]
    http_key: Option<PathBuf>,
    /// Serve the dashboard in clear HTTP instead (loopback addresses only:
    /// a token would cross the network readable by anyone on the path).
    #[arg(long, requires = "http")]
    http_plain: bool,
    /// Serve /metrics (Prometheus' text format) on the dashboard's port to
    /// anyone who reaches it, without a token; by default a scraper
    /// presents a `read` token like any client (docs/metrics.md).
    #[arg(long, requires = "http")]
    metrics_public: bool,
    /// Users' fair-share usage halves every this many seconds (HTCondor's
    /// PRIORITY_HALFLIFE): how long a heavy user's lower share lasts.
    #[arg(long, value_name = "S", default_value_t = 86_400)]
    priority_half_life_s: u64,
    /// Most distinct attribute names (with their spellings) this daemon
    /// keeps, about 300 bytes each: an ad, update, request or query that
    /// would bring more is refused with the reason, names already known
    /// stay usable.
    #[arg(long, value_name = "N", default_value_t = 65_536)]
    max_attribute_names: usize,
    /// Most attribute names new to this daemon that one connection's machine
    /// ads and heartbeat updates may bring over its life.
    #[arg(long, value_name = "N", default_value_t = carmi_global::router::MAX_NEW_NAMES_PER_CONNECTION)]
    max_new_names_per_connection: usize,
    /// Most connections one identity (a user's or a machine's token) may
    /// hold open at once; one more is refused with the reason.
    #[arg(long, value_name = "N", default_value_t = carmi_global::authority::MAX_CONNECTIONS_PER_IDENTITY)]
    max_connections_per_identity: usize,
    /// Most MiB of uploads (masters, workers, input files) one identity may
    /// keep in the store at once; an upload past it is refused with the reason.
    #[arg(long, value_name = "MIB", default_value_t = carmi_global::store::DEFAULT_UPLOAD_QUOTA >> 20)]
    upload_quota_mib: u64,
    /// Seconds a stored file that no live job refers to is kept after its
    /// last use (upload, submit, spawn); then it is removed.
    #[arg(long, value_name = "S", default_value_t = carmi_global::router::DEFAULT_STORE_KEEP.as_secs())]
    store_keep_s: u64,
    /// A concurrency limit, NAME=N (HTCondor's NAME_LIMIT = N): running
    /// jobs whose `concurrency_limits` name NAME take at most N of it at
    /// once (names are case-insensitive); repeat for more names.
    #[arg(long = "concurrency-limit", value_name = "NAME=N")]
    concurrency_limits: Vec<String>,
    /// The limit of every name no --concurrency-limit gives (HTCondor's
    /// CONCURRENCY_LIMIT_DEFAULT) [default: such names are not limited].
    #[arg(long, value_name = "N")]
    concurrency_limit_default: Option<f64>,
    /// Seconds between evaluations of jobs' `periodic_hold`,
    /// `periodic_release` and `periodic_remove` (HTCondor's
    /// PERIODIC_EXPR_INTERVAL; at least 1).
    #[arg(long, value_name = "S", default_value_t = carmi_global::router::PERIODIC_EXPR_INTERVAL.as_secs())]
    periodic_expr_interval_s: u64,
    /// Run as one of several managers (docs/standby.md): the lease file, on
    /// storage every manager shares (NFS), whose lock the active one holds.
    /// Until it gets the lock this manager stands by: it takes the active's
    /// replication stream on --ha-listen and refuses clients of the pool
    /// with where the active one is.
    #[arg(long, value_name = "FILE", requires = "ha_listen")]
    ha_lock: Option<PathBuf>,
    /// Where this manager takes the replication stream while standing by,
    /// HOST:PORT; also its name in the lease file and in the other
    /// managers' --ha-peers.
    #[arg(long, value_name = "HOST:PORT", requires = "ha_lock")]
    ha_listen: Option<String>,
    /// The other managers' --ha-listen, comma-separated: once active, this
    /// manager streams its state to them.
    #[arg(
        long,
        value_name = "HOST:PORT,...",
        value_delimiter = ',',
        requires = "ha_lock"
    )]
    ha_peers: Vec<String>,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    tracing_subscriber::fmt()
        .with_env_filter(
            EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info")),
        )
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal())
        .init();
    let secret_file = secret_file(&args)?;
    let config = server_config(&args, &secret_file)?;
    let auth = config.auth.clone().map(|a| {
        let check: carmi_global::dashboard::TokenCheck =
            std::sync::Arc::new(move |t| a.check_read(t));
        check
    });
    let ha = ha_config(&args, &secret_file, &config)?;
    let active = match &ha {
        Some(ha) => Some(
            carmi_global::ha::stand_by(ha)
                .await
                .context("standing by as a manager")?,
        ),
        None => None,
    };
    let mut server = Server::bind(&args.listen, config).await?;
    if let (Some(ha), Some(active)) = (&ha, active) {
        let feed = carmi_global::ha::start_feed(ha, active);
        server = server.with_mirror(Box::new(feed));
    }
    let addr = server.local_addr()?;
    let mut dashboard_url = None;
    if let Some(http) = &args.http {
        let dashboard = dashboard(&args, http, &secret_file, auth).await?;
        let fingerprint = dashboard.fingerprint().map(str::to_string);
        dashboard_url = Some((dashboard.url()?, fingerprint));
        server = server.with_dashboard(dashboard);
    }
    let mut out = std::io::stdout().lock();
    writeln!(out, "listening on {addr}")?;
    if let Some((url, fingerprint)) = &dashboard_url {
        writeln!(out, "dashboard on {url}")?;
        carmi_global::dashboard::announce(url, fingerprint.as_deref());
    }
    out.flush()?;
    drop(out);
    tracing::info!(%addr, state_dir = %args.state_dir.display(), "carmi-global started");
    server.run(shutdown_signal()).await?;
    Ok(())
}

/// The daemon's settings from its flags, each checked with the reason it
/// is refused.
fn server_config(args: &Args, secret_file: &Path) -> anyhow::Result<ServerConfig> {
    if args.heartbeat_ms == 0 || args.missed_heartbeats == 0 {
        bail!("--heartbeat-ms and --missed-heartbeats must be at least 1");
    }
    carmi_api::files::check_shared_key(secret_file).context("the pool secret")?;
    let secret = Secret::from_file(secret_file).context("reading the pool secret")?;
    let mut config = ServerConfig::new(secret, args.state_dir.clone());
    config.auth = authority(args, secret_file)?;
    config.router = RouterConfig {
        heartbeat: Duration::from_millis(args.heartbeat_ms),
        missed_heartbeats: args.missed_heartbeats,
        cut_off_limit: Duration::from_secs(args.cut_off_limit_s),
        priority_half_life: Duration::from_secs(args.priority_half_life_s.max(1)),
        max_new_names_per_connection: args.max_new_names_per_connection,
        store_keep: Duration::from_secs(args.store_keep_s),
        concurrency_limits: concurrency_limits(args)?,
        policy_interval: Duration::from_secs(args.periodic_expr_interval_s.max(1)),
        ..RouterConfig::default()
    };
    // Past what the daemon itself interns at start (a few hundred names).
    classad::symbol::set_table_limit(args.max_attribute_names.max(4096));
    if args.stage_fanout == 0 || args.stage_link_rate.is_some_and(|r| r.is_nan() || r <= 0.0) {
        bail!("--stage-fanout must be at least 1 and --stage-link-rate positive");
    }
    config.staging = StagingConfig {
        fanout: args.stage_fanout,
        fetch_timeout: Duration::from_secs(args.stage_fetch_timeout_s.max(1)),
    };
    config.stage_link_rate = args.stage_link_rate;
    config.upload_quota = args.upload_quota_mib.saturating_mul(1 << 20);
    config.conn_limits.max_connections = max_connections(args);
    if args.frame_timeout_s == 0 {
        bail!("--frame-timeout-s must be at least 1");
    }
    config.frame_deadline = FrameDeadline {
        base: Duration::from_secs(args.frame_timeout_s),
        ..FrameDeadline::DEFAULT
    };
    let mut pilots = carmi_global::pilots::PilotSettings::beside_this_executable(
        std::path::absolute(secret_file).unwrap_or(secret_file.to_path_buf()),
    );
    if let Some(local) = &args.pilot_local {
        pilots.local_binary = std::path::absolute(local).unwrap_or(local.clone());
    }
    pilots.global_addr = args.pilot_global.clone();
    config.pilots = Some(pilots);
    Ok(config)
}

/// The standby settings of `--ha-lock`, `--ha-listen` and `--ha-peers`.
fn ha_config(
    args: &Args,
    secret_file: &Path,
    config: &ServerConfig,
) -> anyhow::Result<Option<carmi_global::ha::HaConfig>> {
    let (Some(lock), Some(listen)) = (&args.ha_lock, &args.ha_listen) else {
        return Ok(None);
    };
    let beside = secret_file.with_extension("key");
    let key = match &args.pool_key {
        Some(key) => Some(key.clone()),
        None if !args.insecure && beside.exists() => Some(beside),
        None => None,
    };
    let secret = carmi_global::ha::link_secret(key.as_deref(), &config.secret)
        .context("the replication link's secret, from the pool key")?;
    if args.ha_peers.iter().any(|p| p == listen) {
        bail!("--ha-peers names this manager's own --ha-listen ({listen}): list only the others");
    }
    Ok(Some(carmi_global::ha::HaConfig {
        lock: lock.clone(),
        listen: listen.clone(),
        peers: args.ha_peers.clone(),
        serving: args.listen.clone(),
        state_dir: args.state_dir.clone(),
        secret,
    }))
}

/// The concurrency limits of `--concurrency-limit NAME=N` and
/// `--concurrency-limit-default N`, each checked with the reason it is refused.
fn concurrency_limits(args: &Args) -> anyhow::Result<carmi_global::alloc::ConcurrencyConfig> {
    let number = |flag: &str, text: &str| -> anyhow::Result<f64> {
        match text.trim().parse::<f64>() {
            Ok(n) if n.is_finite() && n >= 0.0 => Ok(n),
            _ => bail!(
                "{flag}: `{text}` is not a number of 0 or more (e.g. --concurrency-limit matlab=2)"
            ),
        }
    };
    let mut config = carmi_global::alloc::ConcurrencyConfig::default();
    for given in &args.concurrency_limits {
        let flag = format!("--concurrency-limit {given}");
        let Some((name, n)) = given.split_once('=') else {
            bail!("{flag}: write NAME=N, e.g. --concurrency-limit matlab=2");
        };
        if name.contains([',', ':']) {
            bail!("{flag}: give one name per flag, without an amount");
        }
        // The same rules as a job's names, so that every limit can be named.
        let parsed = carmi_global::alloc::parse_concurrency_limits(name)
            .map_err(|e| anyhow::anyhow!("{flag}: {e}"))?;
        let [(name, _)] = &parsed[..] else {
            bail!("{flag}: give one name per flag");
        };
        if config
            .limits
            .insert(name.clone(), number(&flag, n)?)
            .is_some()
        {
            bail!("{flag}: limit `{name}` is given twice");
        }
    }
    if let Some(n) = args.concurrency_limit_default {
        config.default = Some(number("--concurrency-limit-default", &n.to_string())?);
    }
    Ok(config)
}

/// The pool's token authority, from `--pool-key` or the key `carmi pool
/// init` wrote beside the secret; `None` only with `--insecure`.
fn authority(
    args: &Args,
    secret_file: &Path,
) -> anyhow::Result<Option<std::sync::Arc<carmi_global::server::Authority>>> {
    let beside = secret_file.with_extension("key");
    let pool_key = match &args.pool_key {
        Some(key) => Some(key.clone()),
        None if !args.insecure && beside.exists() => Some(beside.clone()),
        None => None,
    };
    let Some(key) = pool_key else {
        if !args.insecure {
            bail!(
                "no pool signing key: none given (--pool-key) and none beside the secret ({}). \
                 Without it every holder of the pool secret would be an admin of the pool: run \
                 `carmi pool init`, or give --insecure for a development pool",
                beside.display()
            );
        }
        tracing::warn!(
            "--insecure: no signing key; whoever holds the pool secret is an admin of this pool"
        );
        return Ok(None);
    };
    if args.insecure {
        tracing::warn!(
            "--insecure: no signing key; whoever holds the pool secret is an admin of this pool"
        );
    }
    std::fs::create_dir_all(&args.state_dir)
        .with_context(|| format!("creating {}", args.state_dir.display()))?;
    let mut auth = carmi_global::server::Authority::open(&key, &args.state_dir)
        .map_err(|e| anyhow::anyhow!("{e}"))
        .context("reading the pool signing key")?;
    auth.set_connection_cap(args.max_connections_per_identity);
    Ok(Some(std::sync::Arc::new(auth)))
}

/// `--max-connections`, lowered to what the open-file limit (raised as far
/// as it goes) leaves room for.
fn max_connections(args: &Args) -> usize {
    let fds = raise_fd_limit();
    // Room for the journal, the store, staging files and the listener.
    let fit = usize::try_from(fds.saturating_sub(64)).unwrap_or(usize::MAX);
    let wanted = args
        .max_connections
        .unwrap_or(ConnLimits::default().max_connections);
    if wanted > fit {
        // Only a limit asked for explicitly is worth a warning.
        if args.max_connections.is_some() {
            tracing::warn!(
                "--max-connections {wanted} lowered to {fit}: only {fds} files may be open"
            );
        } else {
            tracing::info!("at most {fit} connections: only {fds} files may be open");
        }
    }
    wanted.min(fit).max(1)
}

/// The dashboard on `http`: plain HTTP if asked, else HTTPS with the pool's
/// lasting certificate where there is one, else a fresh one.
async fn dashboard(
    args: &Args,
    http: &str,
    secret_file: &Path,
    auth: Option<carmi_global::dashboard::TokenCheck>,
) -> anyhow::Result<carmi_global::dashboard::Dashboard> {
    use carmi_global::dashboard::Dashboard;
    let dashboard = if args.http_plain {
        Dashboard::bind_plain(http, auth).await
    } else if let Some((cert, key)) = dashboard_cert(args, secret_file) {
        let loaded = carmi_api::webcert::load(&cert, &key)
            .map_err(|e| anyhow::anyhow!("the dashboard's certificate: {e}"))?;
        Dashboard::bind_with_cert(http, auth, loaded).await
    } else {
        Dashboard::bind(http, auth).await
    };
    let dashboard = dashboard.map_err(|e| anyhow::anyhow!(e))?;
    Ok(dashboard.with_public_metrics(args.metrics_public))
}

/// The pool secret's file: `--secret`, else `pool.secret` in the pool's
/// directory.
fn secret_file(args: &Args) -> anyhow::Result<PathBuf> {
    if let Some(s) = &args.secret {
        return Ok(s.clone());
    }
    let dir = carmi_api::pooldir::default_dir_env().context(
        "no --secret, and no pool directory to find pool.secret in (no $CARMI_DIR, $HOME or root)",
    )?;
    let file = dir.join(carmi_api::pooldir::SECRET);
    if !file.exists() {
        bail!(
            "no pool secret: none given (--secret) and none in the pool's directory ({}); \
             run `carmi pool init` there first (or `--dir DIR`, then --secret DIR/pool.secret)",
            file.display()
        );
    }
    Ok(file)
}

/// The dashboard's certificate and key files: the flags, else the ones
/// `carmi pool init` wrote beside the secret, if both are there; `None`
/// makes one in memory.
fn dashboard_cert(args: &Args, secret: &std::path::Path) -> Option<(PathBuf, PathBuf)> {
    if let (Some(c), Some(k)) = (&args.http_cert, &args.http_key) {
        return Some((c.clone(), k.clone()));
    }
    let dir = secret.parent()?;
    let cert = dir.join(carmi_api::pooldir::DASHBOARD_CERT);
    let key = dir.join(carmi_api::pooldir::DASHBOARD_KEY);
    (cert.exists() && key.exists()).then_some((cert, key))
}

/// Raises this process's soft limit on open files to its hard limit (every
/// connection is one) and returns the limit in force.
fn raise_fd_limit() -> libc::rlim_t {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit and setrlimit only read and write the struct passed.
    unsafe {
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) != 0 {
            return 1024;
        }
        if lim.rlim_cur < lim.rlim_max {
            let raised = libc::rlimit {
                rlim_cur: lim.rlim_max,
                rlim_max: lim.rlim_max,
            };
            if libc::setrlimit(libc::RLIMIT_NOFILE, &raised) == 0 {
                lim = raised;
            } else {
                tracing::warn!(
                    "cannot raise the open-file limit from {} to {}",
                    lim.rlim_cur,
                    lim.rlim_max
                );
            }
        }
    }
    lim.rlim_cur
}

/// Completes on SIGINT or SIGTERM.
async fn shutdown_signal() {
    use tokio::signal::unix::{SignalKind, signal};
    match signal(SignalKind::terminate()) {
        Ok(mut term) => {
            tokio::select! {
                _ = tokio::signal::ctrl_c() => {}
                _ = term.recv() => {}
            }
        }
        Err(e) => {
            tracing::warn!("cannot watch SIGTERM ({e}); only SIGINT stops the daemon");
            let _ = tokio::signal::ctrl_c().await;
        }
    }
}
