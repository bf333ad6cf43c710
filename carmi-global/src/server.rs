//! The tokio driver. It accepts connections, runs the handshake, decodes
//! frames and hands each message to the [`Router`], which runs in one task and
//! owns every decision; then it writes what the router says. Executable bytes
//! are the one thing it handles itself (they are storage, not decisions):
//! `Upload` is verified and stored off the connection's read loop (later
//! messages of that connection wait for it, in order, so a `ClassSpawn` sent
//! after an upload finds the executable stored); `Fetch` is answered by the
//! [`Staging`] core with a source, and the store is served to local RMs that
//! connect as [`Role::Stager`] (see `carmi_api::stage`).
//!
//! Machine ads and heartbeat updates are checked against their limits and
//! parsed on the connection's task ([`Decoded`]), a large one on the blocking
//! pool, and each message is stamped with when it was read: the router task
//! only decides, so one huge message stalls its own connection, not the pool,
//! and a machine's heartbeats count from their arrival. When a machine's
//! deadline passes, the router first takes everything already in its inbox.
//!
//! Connections are admitted by a [`Gate`] (caps in total, in handshake, and
//! in handshake per address; refusals logged in summary), and after the
//! handshake a started frame must finish within a [`FrameDeadline`].
//!
//! Tasks: one accept loop, one router task, one task per connection (reading
//! and writing in one `select!`, so that either side ending ends both).
//! Shutdown is a `watch` broadcast; every task holds a clone of a completion
//! sender, so [`Server::run`] returns once they have all finished.

use std::collections::HashMap;
use std::future::Future;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::AtomicU64;
use std::time::Duration;

use bytes::Bytes;
use carmi_api::frame::{DEFAULT_MAX_FRAME, FrameDeadline};
use carmi_api::handshake::Secret;
use carmi_api::msg::{ExecutableRef, FromGlobal, Role};
use carmi_api::stage::RateLimiter;
use tokio::net::TcpListener;
use tokio::sync::{mpsc, watch};
use tokio::time::Instant;
use tracing::{info, warn};

use crate::Error;
use crate::journal::{Journal, Record};
use crate::node::{GlobalCore, Input};
use crate::returned::ReturnedStore;
use crate::router::{Decoded, LinkId, Router, RouterConfig};
use crate::staging::{Staging, StagingConfig};
use crate::store::ExeStore;

mod accept;
mod conn;
mod files;
mod handle;
mod relay;
mod renew;
mod stager;
mod task;

use crate::staging::StageInput;
use accept::{connection, refuse};
use task::router_task;

pub use crate::authority::{Admitted, Authority, MAX_LIFETIME_S};
pub use carmi_api::gate::{ConnLimits, Gate, REFUSAL_LOG_PERIOD, Refusal, Ticket};

/// How long shutdown waits for connections to finish.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(5);

/// Frame headers (message JSON) longer than this are decoded off the worker
/// thread ([`off_worker`]).
const HEAVY_HEADER: usize = 64 * 1024;

/// Largest message (frame header, JSON) the global RM decodes: 16 MiB. Its
/// largest legitimate messages are machine ads and updates (1 MiB of text
/// at most, see `router::MAX_AD_BYTES`) and submit files; executables travel
/// in the payload. A larger header closes the connection before it is
/// decoded, which bounds the memory and time one message can cost.
pub const MAX_HEADER: usize = 16 << 20;

/// Default for [`ServerConfig::max_queued`].
pub const DEFAULT_MAX_QUEUED: usize = 16 * 1024;

/// Settings of the daemon.
#[derive(Clone, Debug)]
pub struct ServerConfig {
    /// The pool's shared secret.
    pub secret: Secret,
    /// Where executables (and later the journal) are kept.
    pub state_dir: PathBuf,
    /// Heartbeats and limits.
    pub router: RouterConfig,
    /// Largest frame accepted after the handshake.
    pub max_frame: usize,
    /// Most frames waiting to be written to one connection. A peer that
    /// stops reading fills its queue and is then disconnected (with a logged
    /// reason) rather than making the daemon's memory grow without limit.
    pub max_queued: usize,
    /// How executables are passed between local RMs.
    pub staging: StagingConfig,
    /// Bandwidth of this daemon's staging sends, in MB/s (`None`: unlimited).
    pub stage_link_rate: Option<f64>,
    /// Caps on connections.
    pub conn_limits: ConnLimits,
    /// How long a frame may take once started, after the handshake.
    pub frame_deadline: FrameDeadline,
    /// The pool's token authority: every connection must then present a
    /// token, and each request is checked against its power. `None` (a pool
    /// without a signing key) admits whoever knows the secret as an admin.
    pub auth: Option<Arc<Authority>>,
    /// Bytes of uploads the store keeps per identity
    /// ([`crate::store::DEFAULT_UPLOAD_QUOTA`]).
    pub upload_quota: u64,
    /// How pilots are started (`carmi alloc`); `None`: allocation queues
    /// may be made, but every submission fails saying so.
    pub pilots: Option<crate::pilots::PilotSettings>,
}

impl ServerConfig {
    /// Defaults for everything but the secret and the state directory.
    pub fn new(secret: Secret, state_dir: PathBuf) -> ServerConfig {
        ServerConfig {
            secret,
            state_dir,
            router: RouterConfig::default(),
            max_frame: DEFAULT_MAX_FRAME,
            max_queued: DEFAULT_MAX_QUEUED,
            staging: StagingConfig::default(),
            stage_link_rate: None,
            conn_limits: ConnLimits::default(),
            frame_deadline: FrameDeadline::DEFAULT,
            auth: None,
            upload_quota: crate::store::DEFAULT_UPLOAD_QUOTA,
            pilots: None,
        }
    }
}

/// A bound, not yet running, global RM.
pub struct Server {
    listener: TcpListener,
    config: ServerConfig,
    store: Arc<ExeStore>,
    stored: Vec<ExecutableRef>,
    returned: Arc<ReturnedStore>,
    journal: Journal,
    recovered: Vec<Record>,
    dashboard: Option<crate::dashboard::Dashboard>,
}

/// The router task's way to a connection: its bounded queue, and a bell
/// that ends the connection when the queue is full (a full queue cannot
/// carry the order to close).
struct LinkTx {
    tx: mpsc::Sender<Outgoing>,
    kick: Arc<tokio::sync::Notify>,
}

/// From connection tasks to the router task.
enum Cmd {
    Opened {
        link: LinkId,
        role: Role,
        /// Boxed, as `msg` below: commands stay small.
        identity: Option<Box<carmi_api::authz::Identity>>,
        out: LinkTx,
    },
    /// An answer the connection's task made itself (token requests), in order.
    Reply {
        link: LinkId,
        /// Boxed, as `Message`: every command would be the size of the largest answer.
        msg: Box<FromGlobal>,
    },
    Message {
        link: LinkId,
        /// Boxed: a parsed ad is large, and every command would be that size.
        msg: Box<Decoded>,
        /// When the frame was read.
        at: Instant,
    },
    /// What a new job's token proved, before its `AppAttach` (`conn::app_identity`).
    AppIdentity(
        LinkId,
        carmi_api::ids::ConnId,
        Result<carmi_api::authz::Identity, String>,
    ),
    Stored(ExecutableRef),
    Staging(StageInput),
    /// Unchanged heartbeats a relay folded (`server/relay.rs`), read at `at`.
    Alive {
        links: Vec<LinkId>,
        at: Instant,
    },
    /// The dashboard asks what `Status` and `Queue`, or `MachineAds`, would answer.
    Dashboard(crate::dashboard::Query),
    Closed {
        link: LinkId,
    },
    /// What the batch system said about pilots.
    Pilot(crate::pilots::PilotReport),
    /// A job's checkpoint was copied into the executable store (or not).
    CheckpointSaved(carmi_api::ids::JobId, Result<Vec<ExecutableRef>, String>),
}

/// A message of one connection on its way to the router task, in order.
enum Pending {
    Ready(Cmd),
    /// Work on the blocking pool (an upload being stored, a large ad being
    /// parsed): the command once it is done.
    Working(tokio::task::JoinHandle<Option<Cmd>>),
}

/// From the router task (or the connection's own reader) to its writer.
// Nearly everything queued is a frame: boxing it would cost an allocation
// per message to save room only in the rare `Close`.
#[allow(clippy::large_enum_variant)]
enum Outgoing {
    Frame(FromGlobal, Bytes),
    Close(String),
}

/// What connection tasks share.
struct Shared {
    secret: Secret,
    max_frame: usize,
    store: Arc<ExeStore>,
    returned: Arc<ReturnedStore>,
    cmds: mpsc::UnboundedSender<Cmd>,
    next_link: AtomicU64,
    limiter: RateLimiter,
    max_queued: usize,
    router: RouterConfig,
    deadline: FrameDeadline,
    gate: Arc<Gate>,
    auth: Option<Arc<Authority>>,
    tls: carmi_api::tls::Acceptor,
}

impl Server {
    /// Opens the state directory and binds `addr` (`HOST:PORT`; port 0 picks one).
    pub async fn bind(addr: &str, config: ServerConfig) -> Result<Server, Error> {
        let (mut store, stored) = ExeStore::open(&config.state_dir)?;
        store.set_quota(config.upload_quota);
        let returned = ReturnedStore::open(&config.state_dir).map_err(|source| {
            crate::store::StoreError::Io {
                path: config.state_dir.join("returned").display().to_string(),
                source,
            }
        })?;
        let opened = std::time::Instant::now();
        let (journal, recovered, damage) =
            Journal::open(&config.state_dir).map_err(|source| Error::Journal {
                path: config.state_dir.display().to_string(),
                source,
            })?;
        // What a restart spends before it serves: at 50,000 jobs, most of it.
        tracing::info!(
            records = recovered.len(),
            took_ms = opened.elapsed().as_millis() as u64,
            "journal read"
        );
        if let Some(d) = damage {
            tracing::error!(
                journal = %journal.path().display(),
                line = d.line,
                offset = d.offset,
                bytes = d.bytes,
                "the journal is damaged from line {} on ({}); the {} records before it are kept, the damaged {} bytes saved as journal.damaged-{}",
                d.line, d.reason, recovered.len(), d.bytes, d.offset
            );
        }
        let listener = carmi_api::net::listen(addr)
            .await
            .map_err(|source| Error::Bind {
                addr: addr.to_string(),
                source,
            })?;
        Ok(Server {
            listener,
            config,
            store: Arc::new(store),
            stored,
            returned: Arc::new(returned),
            journal,
            recovered,
            dashboard: None,
        })
    }

    /// The pool's token authority, if it has a signing key.
    pub fn authority(&self) -> Option<Arc<Authority>> {
        self.config.auth.clone()
    }

    /// Serves `dashboard` (bound with [`Dashboard::bind`](crate::dashboard::Dashboard::bind))
    /// beside the pool while running.
    pub fn with_dashboard(mut self, dashboard: crate::dashboard::Dashboard) -> Server {
        self.dashboard = Some(dashboard);
        self
    }

    /// Copies every journal write to `mirror` (the standby managers,
    /// `crate::ha`) before it counts.
    pub fn with_mirror(mut self, mirror: Box<dyn crate::journal::Mirror>) -> Server {
        self.journal.set_mirror(mirror);
        self
    }

    /// The address actually bound.
    pub fn local_addr(&self) -> Result<SocketAddr, Error> {
        self.listener.local_addr().map_err(|source| Error::Bind {
            addr: "listener".into(),
            source,
        })
    }

    /// The driver of pilots: Slurm, its pilots connecting to this daemon's
    /// address unless the settings name another.
    fn pilot_driver(&self) -> Result<crate::pilots::PilotDriver, Error> {
        let backend: Arc<dyn crate::pilots::Backend> = match &self.config.pilots {
            Some(settings) => Arc::new(crate::pilots::slurm::Slurm::new(
                settings.clone(),
                self.local_addr()?.to_string(),
            )),
            None => Arc::new(crate::pilots::Unconfigured),
        };
        let issue = self.config.auth.clone().map(|auth| {
            let issue: crate::pilots::IssueToken =
                Arc::new(move |machine: &str, lifetime_s: u64| {
                    pilot_token(&auth, machine, lifetime_s)
                });
            issue
        });
        Ok(crate::pilots::PilotDriver::new(
            backend,
            issue,
            self.config.state_dir.clone(),
        ))
    }

    /// Serves until `shutdown` completes, then stops every task and returns.
    pub async fn run(mut self, shutdown: impl Future<Output = ()>) -> Result<(), Error> {
        // A fresh self-signed certificate per run: clients authenticate the
        // daemon through the pool handshake, not the certificate (`carmi_api::tls`).
        let tls = carmi_api::tls::Acceptor::generate().map_err(Error::Tls)?;
        let job_key = carmi_api::jobcred::JobKey::load_or_create(
            &self.config.state_dir.join(crate::jobcred::FILE),
        )
        .map_err(Error::JobKey)?;
        let (stop_tx, stop_rx) = watch::channel(false);
        let (done_tx, mut done_rx) = mpsc::channel::<()>(1);
        let (cmd_tx, cmd_rx) = mpsc::unbounded_channel();
        let pilots = self.pilot_driver()?;
        let (core, mark) = self.recover_core().await?;
        if let Some(dashboard) = self.dashboard.take() {
            let cmds = cmd_tx.clone();
            let ask: crate::dashboard::Ask =
                Arc::new(move |q| cmds.send(Cmd::Dashboard(q)).is_ok());
            let (stop, done) = (stop_rx.clone(), done_tx.clone());
            tokio::spawn(async move {
                dashboard.serve(ask, stop).await;
                drop(done);
            });
        }
        let shared = self.shared(cmd_tx.clone(), tls);
        crate::metrics::METRICS.watch_gate(&shared.gate);
        let kit = task::Kit {
            returned: self.returned.clone(),
            store: self.store.clone(),
            job_key,
            pilots,
            to_router: cmd_tx,
        };
        tokio::spawn(router_task(
            core,
            kit,
            (self.journal, mark),
            cmd_rx,
            stop_rx.clone(),
            done_tx.clone(),
        ));
        if self.config.auth.is_none() {
            warn!(
                "no pool signing key (--pool-key): every client that knows the pool secret acts as an admin"
            );
        }
        accept_until(&self.listener, shutdown, &shared, (&stop_rx, &done_tx)).await;
        info!("shutting down");
        drop(self.listener);
        let _ = stop_tx.send(true);
        drop(done_tx);
        drop(shared);
        if tokio::time::timeout(SHUTDOWN_GRACE, done_rx.recv())
            .await
            .is_err()
        {
            warn!("some connections did not finish within {SHUTDOWN_GRACE:?}");
        }
        Ok(())
    }

    /// The core as the state directory left it: the journal replayed, the
    /// stored executables known to router and staging, the job-id mark
    /// honoured, and returned files no job wants dropped.
    async fn recover_core(&mut self) -> Result<(GlobalCore, crate::idmark::IdMark), Error> {
        // The router reads no clock: where its `now == 0` falls on the wall
        // clock is the driver's to say, as it starts it.
        let mut router_config = self.config.router.clone();
        router_config.started_unix = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs());
        let staging = Staging::new(self.config.staging.clone());
        let mut core = GlobalCore::new(Router::new(router_config), staging);
        // Fed as the daemon feeds a new upload: router and staging alike.
        for exe in &self.stored {
            core.on_input(Input::Stored(exe.clone()), Duration::ZERO);
        }
        let router = core.router();
        router.recover(std::mem::take(&mut self.recovered));
        let mark = crate::idmark::IdMark::open(&self.config.state_dir)
            .map_err(|e| Error::JobKey(format!("job-id mark: {e}")))?;
        router.raise_next_job(mark.floor());
        // Before any connection: a master's files stored from now on are wanted.
        let (store, keep) = (self.returned.clone(), router.kept_files());
        let _ = tokio::task::spawn_blocking(move || store.retain(&keep)).await;
        Ok((core, mark))
    }

    /// What every connection task shares.
    fn shared(
        &self,
        cmds: mpsc::UnboundedSender<Cmd>,
        tls: carmi_api::tls::Acceptor,
    ) -> Arc<Shared> {
        Arc::new(Shared {
            // The global RM proves itself with the pool's signing key.
            secret: match &self.config.auth {
                Some(auth) => self.config.secret.clone().with_signer(auth.signer()),
                None => self.config.secret.clone(),
            },
            max_frame: self.config.max_frame,
            store: self.store.clone(),
            returned: self.returned.clone(),
            cmds,
            next_link: AtomicU64::new(1),
            limiter: RateLimiter::new(self.config.stage_link_rate),
            max_queued: self.config.max_queued,
            router: self.config.router.clone(),
            deadline: self.config.frame_deadline,
            gate: Gate::new(self.config.conn_limits.clone()),
            auth: self.config.auth.clone(),
            tls,
        })
    }
}

/// Accepts connections until `shutdown`: each admitted one gets its task,
/// the others a refusal; refusals and failed accepts are logged in summary.
async fn accept_until(
    listener: &TcpListener,
    shutdown: impl Future<Output = ()>,
    shared: &Arc<Shared>,
    (stop_rx, done_tx): (&watch::Receiver<bool>, &mpsc::Sender<()>),
) {
    let mut summary = tokio::time::interval(REFUSAL_LOG_PERIOD);
    let mut accept_failures = 0u64;
    tokio::pin!(shutdown);
    loop {
        tokio::select! {
            _ = &mut shutdown => break,
            _ = summary.tick() => {
                shared.gate.flush_log();
                if accept_failures > 1 {
                    warn!("{accept_failures} accepts failed in the last {} s (the first is logged above)", REFUSAL_LOG_PERIOD.as_secs());
                }
                accept_failures = 0;
            }
            accepted = listener.accept() => match accepted {
                Ok((stream, peer)) => match shared.gate.admit(peer.ip()) {
                    Ok(ticket) => {
                        let task = connection(stream, peer, ticket, shared.clone(), stop_rx.clone(), done_tx.clone());
                        tokio::spawn(task);
                    }
                    Err(Refusal(reason)) => {
                        shared.gate.note_refusal(peer.ip(), &reason);
                        tokio::spawn(refuse(stream, reason));
                    }
                },
                Err(e) => {
                    // Out of file descriptors and the like: do not spin,
                    // and do not write a line per attempt either.
                    if accept_failures == 0 {
                        warn!("accept failed: {e}");
                    }
                    accept_failures += 1;
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
            },
        }
    }
}

/// A daemon token for pilot `machine`, made by the pool's authority as
/// this daemon itself (an admin), recorded in its book like any other.
fn pilot_token(auth: &Authority, machine: &str, lifetime_s: u64) -> Result<String, String> {
    use carmi_api::authz::{Identity, Power, TokenAnswer, TokenRequest};
    let me = Identity {
        name: "carmi-global".into(),
        power: Power::Admin,
        machine: None,
        token: String::new(),
    };
    let req = TokenRequest::Create {
        identity: machine.to_string(),
        power: Power::Daemon,
        machine: Some(machine.to_string()),
        lifetime_s,
    };
    match auth.handle(Some(&me), req) {
        FromGlobal::Tokens(TokenAnswer::Created { token, .. }) => Ok(token),
        FromGlobal::AdminFailed(f) => Err(f.message),
        other => Err(format!("unexpected answer {other:?}")),
    }
}

/// Queues `msg` for `link`. A connection whose queue is full has stopped
/// reading: the core hears so, and kicks it (the router then hears `Closed`
/// from its task, as for any other end).
fn send_or_kick(
    core: &mut GlobalCore,
    links: &mut HashMap<LinkId, LinkTx>,
    link: LinkId,
    msg: FromGlobal,
) {
    let Some(out) = links.get(&link) else { return };
    match out.tx.try_send(Outgoing::Frame(msg, Bytes::new())) {
        Ok(()) => {}
        Err(mpsc::error::TrySendError::Full(_)) => core.on_unread(link),
        // The connection task has ended; its `Closed` is on the way.
        Err(mpsc::error::TrySendError::Closed(_)) => {}
    }
}

/// Runs `f`, which keeps a thread busy for a while: on a multi-threaded
/// runtime the worker hands its other tasks over first.
fn off_worker<T>(f: impl FnOnce() -> T) -> T {
    let multi = tokio::runtime::Handle::current().runtime_flavor()
        == tokio::runtime::RuntimeFlavor::MultiThread;
    if multi {
        tokio::task::block_in_place(f)
    } else {
        f()
    }
}
