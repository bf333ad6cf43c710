//! The driver: one task that owns the [`Core`], feeds it every input (from
//! the global link, application connections, launches, stores, exits) and
//! the time, at the deadlines the core names (the kill grace's end, the next
//! heartbeat), and carries out its effects. It decides nothing itself.
//!
//! Blocking work (copying an executable into a sandbox, hashing and writing
//! staged bytes) runs on tokio's blocking pool and comes back as an input;
//! each process has a thread blocked in `wait4` (see [`crate::spawn`]).
//!
//! The owner policy ([`crate::policy`]) is stepped when an owner event
//! arrives, and when the core says it is due ([`Core::policy_due`]): the
//! number of job processes changed, or its deadline came (a real owner is
//! measured first); the core carries out its effects.
//!
//! Shutdown: the launcher is closed first (no process starts after that,
//! and a launch under way finishes and is counted), then every process group
//! it started gets SIGTERM (SIGKILL after the grace period), whether or not
//! its launch had been reported; their exits are reported to the global RM
//! if it is there; then the listener and the global link stop. Dropping the driver without a
//! shutdown (a runtime torn down) SIGKILLs every group still alive.
//!
//! How each input is handed to the core is in `daemon_inputs.rs`, how each
//! effect is carried out in `daemon_effects.rs`.

use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use carmi_api::handshake::Secret;
use carmi_api::ids::{ConnId, ProcessId};
use carmi_api::msg::OwnerEvent;
use carmi_local_core::node::{Core, PolicyDue};
use carmi_local_core::stopping::{StopOutput, Stopping};
use classad::ClassAd;
use tokio::sync::{mpsc, oneshot, watch};
use tokio::task::JoinHandle;
use tokio::time::Instant;

use crate::Error;
use crate::cache::ExeCache;
use crate::config::{OwnerSource, Settings};
use crate::global::GlobalLink;
use crate::input::{AppTx, Input};
use crate::jobcred::JobCreds;
use crate::machine::{MachineAd, sample_dynamic};
use crate::owner::{RealOwner, SimulatedOwner};
use crate::peer::Stager;
use crate::policy::Policy;
use crate::spawn::{Launcher, ProcessGroup};
use start::{
    bind_stage_listener, connect_addr, detect_machine, job_env, listen_apps, new_core, serve_links,
    start_launcher,
};

/// Inputs queued before senders (connections) wait for the driver.
const INPUT_QUEUE: usize = 4096;

/// How often the machine ad the policy sees is re-sampled (load, memory, disk).
const BASE_AD_REFRESH: Duration = Duration::from_secs(5);

/// The owner activity source of a running daemon.
enum OwnerInput {
    Real(RealOwner),
    Simulated(SimulatedOwner),
}

/// A running local RM.
pub struct Daemon {
    app_addr: SocketAddr,
    work_dir: PathBuf,
    slots: u32,
    inputs: mpsc::Sender<Input>,
    shutdown: watch::Sender<Stop>,
    /// Turns true when the driver has stopped (asked to, or orphaned).
    stopped: watch::Receiver<bool>,
    driver: JoinHandle<()>,
}

/// What the daemon was asked to do at its next turn.
#[derive(Clone, Debug, PartialEq)]
enum Stop {
    /// Serve.
    No,
    /// Stop: kill every process, report their exits.
    Quietly,
    /// Stop for good: tell the global RM that this machine leaves (with
    /// the reason), then kill every process.
    Leaving(String),
}

impl Daemon {
    /// Detects the machine, opens the application listener and starts
    /// connecting to the global RM. Fails on configuration and file errors;
    /// an unreachable global RM is not an error (the daemon keeps trying).
    pub async fn start(settings: Settings) -> Result<Daemon, Error> {
        let io = |what, path: &PathBuf| {
            let path = path.clone();
            move |source| Error::Io { what, path, source }
        };
        std::fs::create_dir_all(&settings.work_dir)
            .map_err(io("cannot create work directory", &settings.work_dir))?;
        let work_dir = std::fs::canonicalize(&settings.work_dir)
            .map_err(io("cannot resolve work directory", &settings.work_dir))?;
        let secret = Secret::from_file(&settings.secret_file)?;
        // Only the link to the global RM presents the daemon token: the
        // other connections this daemon opens reach peers and job processes.
        // Read first, so that a file others may read stops the start at once.
        let token = crate::daemon_token::daemon_token((&settings.token, &settings.token_file))?;

        let (machine, slots, cgroups) = detect_machine(&settings, &work_dir).await;

        let (listener, app_addr) = listen_apps(&settings.listen).await?;
        let metrics = crate::metrics::bind(settings.metrics_addr.as_deref()).await?;
        let cache_dir = work_dir.join("cache");
        let cache = ExeCache::open(cache_dir.clone())
            .map_err(io("cannot open executable cache", &cache_dir))?;
        let (stage_listener, stage_endpoint) =
            bind_stage_listener(app_addr, settings.stage_listen.as_deref()).await?;
        let env = job_env(app_addr, &work_dir, &machine);
        let launcher = start_launcher(&settings, slots, (&work_dir, env), cgroups)?;

        let (inputs_tx, inputs_rx) = mpsc::channel(INPUT_QUEUE);
        crate::metrics::serve(metrics, inputs_tx.clone());
        let (shutdown_tx, shutdown_rx) = watch::channel(Stop::No);
        let (stopped_tx, stopped_rx) = watch::channel(false);
        // The links stop only after the driver has reported the final exits.
        let (links_stop_tx, links_stop_rx) = watch::channel(false);
        let creds = JobCreds::default();
        let (stager, global_task) = serve_links(
            &settings,
            (listener, stage_listener),
            (&secret, token, &creds),
            cache_dir,
            &inputs_tx,
            links_stop_rx,
        )?;
        tracing::info!(
            name = %settings.name,
            slots,
            listen = %app_addr,
            work_dir = %work_dir.display(),
            global = %settings.global,
            "local RM started"
        );
        let epoch = Instant::now();
        let owner = owner_input(&settings);
        let base_ad = machine.build(&sample_dynamic(&work_dir));
        let mut driver = Driver {
            core: new_core(&settings, slots),
            policy: Policy::new(settings.policy.clone(), 0.0),
            owner,
            epoch,
            unix_epoch: std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0.0, |d| d.as_secs_f64()),
            base_ad,
            base_at: epoch,
            work_dir: work_dir.clone(),
            machine,
            cache,
            stager,
            stage_endpoint,
            stage_advertise: settings.stage_advertise.clone(),
            global_local_ip: None,
            launcher,
            groups: Groups::default(),
            global: GlobalLink::new(settings.global.clone(), settings.global_stall),
            apps: HashMap::new(),
            inputs_tx: inputs_tx.clone(),
            kill_grace: settings.kill_grace,
            creds,
            orphaned: false,
            stopped: stopped_tx,
        };
        driver.measure();
        driver.evaluate();
        driver.flush();
        let driver = tokio::spawn(driver.run(inputs_rx, shutdown_rx, links_stop_tx, global_task));
        Ok(Daemon {
            app_addr,
            work_dir,
            slots,
            inputs: inputs_tx,
            shutdown: shutdown_tx,
            stopped: stopped_rx,
            driver,
        })
    }

    /// Where applications connect.
    pub fn app_addr(&self) -> SocketAddr {
        self.app_addr
    }

    /// The (absolute) work directory.
    pub fn work_dir(&self) -> &std::path::Path {
        &self.work_dir
    }

    /// Number of slots.
    pub fn slots(&self) -> u32 {
        self.slots
    }

    /// Owner back: stops the processes of `slot` and tells the global RM.
    /// False if there is no such slot or the daemon is stopping.
    pub async fn suspend_slot(&self, slot: u32) -> bool {
        let (tx, rx) = oneshot::channel();
        self.inputs.send(Input::SuspendSlot(slot, tx)).await.is_ok() && rx.await.unwrap_or(false)
    }

    /// Owner gone: continues the processes of `slot` and tells the global RM.
    pub async fn resume_slot(&self, slot: u32) -> bool {
        let (tx, rx) = oneshot::channel();
        self.inputs.send(Input::ResumeSlot(slot, tx)).await.is_ok() && rx.await.unwrap_or(false)
    }

    /// Reports owner activity (from a simulated owner) and returns once the
    /// owner policy has acted on it. Ignored (with a warning) when the owner
    /// source is `real`. False if the daemon is stopping.
    pub async fn owner_event(&self, event: OwnerEvent) -> bool {
        let (tx, rx) = oneshot::channel();
        self.inputs
            .send(Input::Owner(event, Some(tx)))
            .await
            .is_ok()
            && rx.await.is_ok()
    }

    /// Kills every process (SIGTERM, SIGKILL after the grace period), reports
    /// their exits, closes all connections, and returns when all is done.
    pub async fn shutdown(self) {
        let _ = self.shutdown.send(Stop::Quietly);
        if let Err(e) = self.driver.await {
            tracing::error!(error = %e, "the local RM driver failed");
        }
    }

    /// As [`Daemon::shutdown`], for a machine that goes away for good (a
    /// signal, a pilot's batch job cancelled): the global RM is told first,
    /// with `reason`, so that the applications hear that their hosts are
    /// lost before their processes are killed here.
    pub async fn leave(self, reason: &str) {
        let _ = self.shutdown.send(Stop::Leaving(reason.to_string()));
        if let Err(e) = self.driver.await {
            tracing::error!(error = %e, "the local RM driver failed");
        }
    }

    /// Completes when the daemon has stopped, on its own (orphaned: no
    /// global RM for the orphan limit) or because it was asked to; then
    /// [`Daemon::shutdown`] only waits for what is left.
    pub async fn stopped(&self) {
        let mut rx = self.stopped.clone();
        let _ = rx.wait_for(|s| *s).await;
    }
}

/// Where the owner's activity comes from, as `settings` say (logged with the policy).
fn owner_input(settings: &Settings) -> OwnerInput {
    tracing::info!(
        source = ?settings.owner_source,
        minute = settings.policy.minute,
        start = %settings.policy.start,
        suspend = %settings.policy.suspend,
        "owner policy"
    );
    match settings.owner_source {
        OwnerSource::Real => OwnerInput::Real(RealOwner::default()),
        OwnerSource::Simulated => OwnerInput::Simulated(SimulatedOwner::new(0.0)),
    }
}

/// Where peers on other machines reach a staging listener bound to `bound`:
/// a wildcard address means "every interface", so the one this machine uses
/// towards the global RM is named (peers reach the global RM too); without
/// one, loopback (peers on this machine only).
fn stage_endpoint_for(bound: SocketAddr, towards_global: Option<IpAddr>) -> SocketAddr {
    match towards_global {
        Some(ip) if bound.ip().is_unspecified() && !ip.is_unspecified() => {
            SocketAddr::new(ip, bound.port())
        }
        _ => connect_addr(bound),
    }
}

/// Live process groups; SIGKILLed if dropped, so that no process outlives a
/// driver that did not shut down cleanly.
#[derive(Default)]
struct Groups(HashMap<ProcessId, ProcessGroup>);

impl Drop for Groups {
    fn drop(&mut self) {
        for g in self.0.values() {
            g.kill_now();
        }
    }
}

struct Driver {
    core: Core,
    policy: Policy,
    owner: OwnerInput,
    /// Policy time 0.
    epoch: Instant,
    /// Policy time 0 in Unix seconds (for `EnteredCurrentState` in the ad).
    unix_epoch: f64,
    /// The machine ad the policy evaluates against, and when it was sampled.
    base_ad: ClassAd,
    base_at: Instant,
    work_dir: PathBuf,
    machine: MachineAd,
    cache: ExeCache,
    /// Fetches executables from peers and serves them ([`crate::peer`]).
    stager: Arc<Stager>,
    /// Where peers reach [`Driver::stager`], told to the global RM on
    /// registration. A wildcard address is replaced by this machine's
    /// address towards the global RM (see [`stage_endpoint_for`]).
    stage_endpoint: SocketAddr,
    /// `--stage-advertise`: told to peers instead of `stage_endpoint`.
    stage_advertise: Option<String>,
    /// This machine's address on the current global connection.
    global_local_ip: Option<IpAddr>,
    launcher: Launcher,
    groups: Groups,
    global: GlobalLink,
    apps: HashMap<ConnId, AppTx>,
    inputs_tx: mpsc::Sender<Input>,
    /// The kill grace (the core's), to bound how long stopping waits.
    kill_grace: Duration,
    /// The credentials of the jobs present here (also for the output
    /// connections to requesters, which prove their job's).
    creds: JobCreds,
    /// The core gave up waiting for the global RM ([`Effect::Orphaned`]):
    /// the driver stops.
    orphaned: bool,
    /// Told when the driver has stopped ([`Daemon::stopped`]).
    stopped: watch::Sender<bool>,
}

impl Driver {
    async fn run(
        mut self,
        mut inputs: mpsc::Receiver<Input>,
        mut shutdown: watch::Receiver<Stop>,
        links_stop: watch::Sender<bool>,
        global_task: JoinHandle<()>,
    ) {
        loop {
            tokio::select! {
                input = inputs.recv() => match input {
                    Some(input) => self.handle(input),
                    None => break,
                },
                permit = self.global.room() => self.global.on_room(permit),
                _ = at(self.global.deadline()) => self.global.on_deadline(),
                _ = at(self.core_deadline()) => self.core.on_time(self.now()),
                _ = shutdown.wait_for(|s| *s != Stop::No) => break,
            }
            self.step_policy_if_due();
            self.flush();
            if self.orphaned {
                break;
            }
        }
        let stop = shutdown.borrow().clone();
        if let Stop::Leaving(reason) = stop {
            self.leave(&reason, &mut inputs, &links_stop).await;
        }
        self.stop(&mut inputs).await;
        let _ = links_stop.send(true);
        let _ = global_task.await;
        tracing::info!("local RM stopped");
        let _ = self.stopped.send(true);
    }

    /// Tells a registered global RM that this machine leaves, and waits (at
    /// most [`carmi_local_core::stopping::LEAVE_WAIT`]) until it has acted on it, which it shows by
    /// closing the connection; the link then stops, so that it does not
    /// advertise again. Exits that come meanwhile (a batch system signals
    /// the processes too) are handled as usual; what to take and when to
    /// stop waiting is the core's [`Stopping`].
    async fn leave(
        &mut self,
        reason: &str,
        inputs: &mut mpsc::Receiver<Input>,
        links_stop: &watch::Sender<bool>,
    ) {
        if !self.core.leave(reason) {
            return;
        }
        self.flush();
        let mut stopping = Stopping::leaving(self.now());
        loop {
            let input = tokio::select! {
                i = inputs.recv() => i,
                permit = self.global.room() => {
                    self.global.on_room(permit);
                    continue;
                }
                _ = at(self.instant(stopping.deadline())) => {
                    tracing::warn!("the global RM did not answer `Leaving` in time; stopping anyway");
                    break;
                }
            };
            let Some(input) = input else { break };
            let kind = input.stop_kind();
            if stopping.takes(kind) {
                self.handle(input);
            }
            self.flush();
            if stopping.on_input(kind) == Some(StopOutput::Left) {
                tracing::info!("the global RM took note that this machine leaves");
                break;
            }
        }
        let _ = links_stop.send(true);
    }

    /// Refuses new processes, has the core kill all it started (including
    /// those whose launch has not been reported yet, once it is), and keeps
    /// serving exits, launches and the core's deadlines until every process
    /// has exited, or the core's [`Stopping`] deadline (the kill grace and a
    /// margin) is over.
    async fn stop(&mut self, inputs: &mut mpsc::Receiver<Input>) {
        // First the gate: after `close` no process can start, and every one
        // that did is in its list, reported to this driver or not; those not
        // yet reported are SIGKILLed by `Groups` if they outlive this.
        let launcher = self.launcher.clone();
        let started = tokio::task::spawn_blocking(move || launcher.close())
            .await
            .unwrap_or_default();
        for (p, g) in started {
            self.groups.0.entry(p).or_insert(g);
        }
        if self.core.job_count() > 0 {
            tracing::info!(
                processes = self.core.job_count(),
                "stopping: killing all processes"
            );
        }
        self.core.on_time(self.now());
        self.core.shut_down();
        self.flush();
        let stopping = Stopping::killing(self.now(), self.kill_grace);
        while self.core.job_count() > 0 {
            let input = tokio::select! {
                i = inputs.recv() => i,
                _ = at(self.core_deadline()) => {
                    self.core.on_time(self.now());
                    self.flush();
                    continue;
                }
                _ = at(self.instant(stopping.deadline())) => None,
            };
            let Some(input) = input else {
                tracing::warn!(
                    left = self.core.job_count(),
                    "processes did not exit in time"
                );
                break;
            };
            // Nothing new is started while stopping.
            if stopping.takes(input.stop_kind()) {
                self.handle(input);
            }
            self.flush();
        }
        // Now, not when the last clone goes: the process may end first.
        self.launcher.remove_cgroups();
    }

    /// When the core wants to be told the time next, on the driver's clock.
    fn core_deadline(&self) -> Option<Instant> {
        self.instant(self.core.next_deadline()?)
    }

    /// The instant of policy time `t`; none for one beyond any `Duration`
    /// (a policy minute set absurdly long), which never comes.
    fn instant(&self, t: f64) -> Option<Instant> {
        let since = Duration::try_from_secs_f64(t.max(0.0)).ok()?;
        self.epoch.checked_add(since)
    }

    /// Policy time now: seconds since the driver started.
    pub(crate) fn now(&self) -> f64 {
        self.epoch.elapsed().as_secs_f64()
    }

    /// Takes a fresh look at the owner (real source) and the machine ad.
    fn measure(&mut self) {
        let now = self.now();
        if let OwnerInput::Real(r) = &mut self.owner {
            let pids: Vec<i32> = self.groups.0.values().map(|g| g.pgid()).collect();
            self.policy.observe(r.measure(now, &pids));
        }
        if self.base_at.elapsed() >= BASE_AD_REFRESH {
            self.base_ad = self.machine.build(&sample_dynamic(&self.work_dir));
            self.base_at = Instant::now();
        }
    }

    /// Steps the owner policy if the core says it is due: at its deadline
    /// after a fresh look at the owner and the machine, or at once when the
    /// number of processes changed.
    fn step_policy_if_due(&mut self) {
        match self.core.policy_due() {
            Some(PolicyDue::Deadline) => {
                self.measure();
                self.evaluate();
            }
            Some(PolicyDue::JobsChanged) => self.evaluate(),
            None => {}
        }
    }

    /// Steps the owner policy, after a look at a simulated owner; the core
    /// carries out what it decides and keeps when it is due next.
    fn evaluate(&mut self) {
        let now = self.now();
        if let OwnerInput::Simulated(o) = &self.owner {
            self.policy.observe(o.observation(now));
        }
        self.core.step_policy(&mut self.policy, now, &self.base_ad);
    }
}

/// Resolves at `deadline`; never without one.
async fn at(deadline: Option<Instant>) {
    match deadline {
        Some(d) => tokio::time::sleep_until(d).await,
        None => std::future::pending().await,
    }
}

#[path = "daemon_effects.rs"]
mod effects;
#[path = "daemon_inputs.rs"]
mod inputs;
#[path = "daemon_start.rs"]
mod start;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_wildcard_staging_listener_is_named_by_the_address_towards_the_global_rm() {
        let any: SocketAddr = "0.0.0.0:7000".parse().unwrap();
        let lan: IpAddr = "10.1.2.3".parse().unwrap();
        assert_eq!(
            stage_endpoint_for(any, Some(lan)),
            "10.1.2.3:7000".parse().unwrap()
        );
        // Without a global connection's address: this machine only.
        assert_eq!(
            stage_endpoint_for(any, None),
            "127.0.0.1:7000".parse().unwrap()
        );
        // A concrete address is kept as configured.
        let fixed: SocketAddr = "192.168.0.5:7000".parse().unwrap();
        assert_eq!(stage_endpoint_for(fixed, Some(lan)), fixed);
    }
}
