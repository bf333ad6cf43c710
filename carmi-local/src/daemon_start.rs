//! The daemon's start-up, before the driver runs: the machine detected,
//! the listeners bound, the launcher cleaned of an earlier run's leftovers,
//! the connection tasks started, the core configured.
//!
//! Kept apart from `daemon.rs` (the driver's loop and shutdown) so that each
//! file stays readable; it names nothing of the driver's.

use std::ffi::OsString;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::path::PathBuf;
use std::sync::Arc;

use carmi_api::handshake::Secret;
use carmi_local_core::node::Core;
use tokio::net::TcpListener;
use tokio::sync::{mpsc, watch};
use tokio::task::JoinHandle;

use crate::config::Settings;
use crate::control::ControlAccess;
use crate::daemon_token::DaemonToken;
use crate::global::GlobalConfig;
use crate::input::Input;
use crate::jobcred::JobCreds;
use crate::machine::{MachineAd, sample_dynamic, static_info};
use crate::peer::Stager;
use crate::spawn::Launcher;
use crate::{Error, apps, benchmark, global};

/// The listener on which peers fetch from this machine's executable cache:
/// one of its own, on `at` (`--stage-listen`) or else the application
/// listener's host, and where it listens.
pub(super) async fn bind_stage_listener(
    app_addr: SocketAddr,
    at: Option<&str>,
) -> Result<(TcpListener, SocketAddr), Error> {
    let addr = at.map_or_else(|| format!("{}:0", app_addr.ip()), str::to_string);
    let listener = TcpListener::bind(addr.as_str())
        .await
        .map_err(|source| Error::Listen {
            addr: format!("{addr} (staging)"),
            source,
        })?;
    let endpoint = listener.local_addr().map_err(|source| Error::Listen {
        addr: "staging listener".into(),
        source,
    })?;
    Ok((listener, endpoint))
}

/// Binds the application listener at `listen`: it and its address.
pub(super) async fn listen_apps(
    listen: &str,
) -> Result<(tokio::net::TcpListener, std::net::SocketAddr), Error> {
    let failed = |source| Error::Listen {
        addr: listen.to_string(),
        source,
    };
    let listener = carmi_api::net::listen(listen).await.map_err(failed)?;
    let addr = listener.local_addr().map_err(failed)?;
    Ok((listener, addr))
}

/// The machine as detected (benchmarked if asked, with its cgroups) and
/// configured: its ad, its number of slots, and its cgroups if any.
pub(super) async fn detect_machine(
    settings: &Settings,
    work_dir: &std::path::Path,
) -> (MachineAd, u32, Option<crate::cgroup::Cgroups>) {
    let scores = if settings.benchmark {
        let dir = work_dir.to_path_buf();
        tokio::task::spawn_blocking(move || benchmark::scores(&dir))
            .await
            .ok()
    } else {
        None
    };
    let configured_gpus = settings.gpus;
    let gpus = tokio::task::spawn_blocking(move || crate::gpu::detect(configured_gpus))
        .await
        .unwrap_or_else(|_| crate::gpu::Gpus::new(Vec::new(), configured_gpus));
    let cgroups = crate::cgroup::start(&settings.name, work_dir, settings.cgroups);
    let info = (settings.name.as_str(), settings.slots);
    let (info, slots) = static_info(info, scores, cgroups.as_ref(), gpus);
    let machine = MachineAd::new(info, settings.attributes.clone());
    (machine, slots, cgroups)
}

/// Starts the connection tasks, which stop when `stop` turns true: the
/// application listener, the staging listener (with the stager the driver
/// fetches through, returned) and the link to the global RM (its task
/// returned, so that the driver waits for its last words).
pub(super) fn serve_links(
    settings: &Settings,
    (listener, stage_listener): (TcpListener, TcpListener),
    (secret, token, creds): (&Secret, DaemonToken, &JobCreds),
    cache_dir: PathBuf,
    inputs: &mpsc::Sender<Input>,
    stop: watch::Receiver<bool>,
) -> Result<(Arc<Stager>, JoinHandle<()>), Error> {
    // Made in memory at every start: nobody handles a certificate, and
    // the handshake proves who the daemon is (see `carmi_api::tls`).
    let tls = carmi_api::tls::Acceptor::generate().map_err(Error::Tls)?;
    let (name, global) = (settings.name.clone(), settings.direct());
    let access = ControlAccess::new(token.clone(), name, global, secret.clone());
    // With tokens, this local RM proves its machine with a key the
    // global RM certifies, and tokens are shown to it for its name.
    let prover = crate::daemon_token::machine_prover(&token)?;
    let mut proving = secret.clone().with_name(&settings.name);
    if let Some(p) = &prover {
        proving = proving.with_prover(p.clone());
    }
    tokio::spawn(apps::serve(
        (listener, tls.clone()),
        (proving.clone(), creds.clone(), access.clone()),
        (settings.app_queue, settings.max_connections_per_job),
        inputs.clone(),
        stop.clone(),
    ));
    let stager = Arc::new(Stager::new(
        cache_dir,
        (proving, token.clone(), access),
        settings.name.clone(),
        settings.direct(),
        settings.stage_link_rate,
    ));
    tokio::spawn(stager.clone().serve((stage_listener, tls), stop.clone()));
    let gcfg = GlobalConfig {
        addr: settings.global.clone(),
        secret: secret.clone(),
        token,
        prover,
        name: settings.name.clone(),
        queue: settings.global_queue,
    };
    let global_task = tokio::spawn(global::run(gcfg, inputs.clone(), stop));
    Ok((stager, global_task))
}

/// The launcher of this machine's processes (as slot users, in cgroups, as
/// configured), once what an earlier run left behind is killed and removed.
pub(super) fn start_launcher(
    settings: &Settings,
    slots: u32,
    (work_dir, env): (&std::path::Path, Vec<(String, OsString)>),
    cgroups: Option<crate::cgroup::Cgroups>,
) -> Result<Launcher, Error> {
    let accounts = crate::isolation::start(&settings.accounts, slots, work_dir)?;
    let launcher = Launcher::new(work_dir.to_path_buf(), env)
        .with_accounts(accounts)
        .with_cgroups(cgroups);
    // Before the first launch, so that every record is an earlier run's.
    launcher.kill_leftovers();
    launcher.clean_stale_sandboxes();
    Ok(launcher)
}

/// The core of a machine with `slots` slots, with the configured kill
/// grace, heartbeat fallback and orphan limit.
pub(super) fn new_core(settings: &Settings, slots: u32) -> Core {
    let mut core = Core::new(slots);
    core.set_timers(settings.kill_grace, settings.heartbeat_fallback);
    core.set_orphan_limit(settings.orphan_limit);
    core
}

/// The environment of every process started here, on top of the daemon's:
/// where the local RM is, and the machine ad. Not the pool secret: each
/// process gets its job's credential instead ([`crate::jobcred`]).
pub(super) fn job_env(
    app_addr: SocketAddr,
    work_dir: &std::path::Path,
    machine: &MachineAd,
) -> Vec<(String, OsString)> {
    let mut env: Vec<(String, OsString)> = vec![(
        "CARMI_LOCAL".into(),
        connect_addr(app_addr).to_string().into(),
    )];
    // The machine ad as of start-up, for the processes started here (as
    // HTCondor's `_CONDOR_MACHINE_AD`): a job can read what the pool
    // knows of its machine (`Speed`, `Memory`, ...) without a request.
    let ad_path = work_dir.join("machine.ad");
    let snapshot = machine.build(&sample_dynamic(work_dir)).to_old_syntax();
    match std::fs::write(&ad_path, snapshot) {
        Ok(()) => env.push(("CARMI_MACHINE_AD".into(), ad_path.into_os_string())),
        Err(e) => tracing::warn!(
            path = %ad_path.display(),
            error = %e,
            "cannot write the machine ad for job processes; they run without CARMI_MACHINE_AD"
        ),
    }
    env
}

/// The address a process on this machine should connect to: a wildcard
/// listen address is reachable through loopback.
pub(super) fn connect_addr(a: SocketAddr) -> SocketAddr {
    match a.ip() {
        IpAddr::V4(ip) if ip.is_unspecified() => {
            SocketAddr::new(Ipv4Addr::LOCALHOST.into(), a.port())
        }
        IpAddr::V6(ip) if ip.is_unspecified() => {
            SocketAddr::new(Ipv6Addr::LOCALHOST.into(), a.port())
        }
        _ => a,
    }
}
