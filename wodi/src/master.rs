//! The master library.
//!
//! [`Master::init`] starts the WoDi server (by default the current executable
//! again, with `WODI_ROLE=server`; see [`crate::enter`]), connects to it and
//! sends the classes, the worker command and the init data. Then the master
//! submits steps ([`Master::send_work`]), optionally grouped in cycles, and
//! receives one [`StepOutcome`] per step ([`Master::recv_result`]). Sending
//! never waits: frames are queued to a writer task that batches them.
//! [`Master::complete`] releases the pool and returns the [`Stats`].
//!
//! Cycles: a cycle's steps should all have returned before the next
//! `begin_cycle`, since a worker holds one cycle's begin data at a time.
//!
//! Host speed: [`MasterConfig::speed`] says where the server gets each
//! host's relative speed (a class speed, a machine-ad score, or a benchmark
//! step run on every new worker; see [`crate::speed`]), and
//! [`MasterConfig::refine_speed`] lets observed step times correct it. The
//! first master of a server sets these for every master sharing it.
//!
//! Checkpoints: with [`MasterConfig::checkpoint`], [`Master::checkpoint`]
//! after each completed cycle writes the cycle, the application's state and
//! WoDi's history to that file atomically. A master started again with the
//! same file gets them back from [`Master::resume_point`] (and the server
//! starts from the saved history), so it goes on after the last completed
//! cycle instead of from the beginning:
//!
//! ```no_run
//! # async fn run(mut cfg: wodi::master::MasterConfig) -> Result<(), wodi::master::MasterError> {
//! use wodi::master::Master;
//! use wodi::CycleId;
//! cfg.checkpoint = Some("job.checkpoint".into());
//! let mut master = Master::init(cfg, &()).await?;
//! let (first, mut state) = match master.resume_point::<Vec<f64>>()? {
//!     Some((done, state)) => (done.0 + 1, state),
//!     None => (0, Vec::new()),
//! };
//! for c in first..35 {
//!     // ... begin_cycle, send_work, recv_result, end_cycle, update `state` ...
//!     master.checkpoint(CycleId(c), &state).await?;
//! }
//! # Ok(()) }
//! ```

use std::path::PathBuf;
use std::process::Stdio;
use std::time::Duration;

use bytes::Bytes;
use carmi_api::conn::ConnReader;
use serde::Serialize;
use serde::de::DeserializeOwned;
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::sync::{mpsc, watch};

use std::collections::VecDeque;

use crate::checkpoint::{CHECKPOINT_FORMAT, Checkpoint, CheckpointError, SavedEstimate};
use crate::conn::{Outgoing, Writer, spawn_reader, spawn_writer};
use crate::ids::{CycleId, StepId};
use crate::proto::{
    ClassSpec, FromMaster, Hello, HelloRole, Policies, Status, ToMaster, WODI_PROTOCOL,
};
use crate::speed::SpeedSource;
use crate::stats::Stats;

/// Which executable runs the server.
#[derive(Clone, Debug, Default)]
pub enum ServerCommand {
    /// This executable again (its `main` must call [`crate::enter`] first).
    #[default]
    CurrentExe,
    /// Another executable that serves when started with `WODI_ROLE=server`
    /// (the `wodi-server` binary does).
    Path(PathBuf),
    /// A program with arguments that serves when started with
    /// `WODI_ROLE=server` (an interpreter running a module: the Python
    /// package's `python -m wodi._server`).
    Command {
        /// The program.
        program: PathBuf,
        /// Its arguments.
        args: Vec<String>,
    },
    /// A server already running for another master (see [`Master::server`]):
    /// this master shares its workers, so it must name the same worker
    /// executable and arguments.
    Connect {
        /// The server's address.
        addr: String,
        /// Its run token.
        token: String,
    },
}

/// Where the pool is: the local RM's address, the pool secret file and
/// the user's token file.
#[derive(Clone, Debug)]
pub struct PoolAddr {
    /// `host:port` of the local RM.
    pub local: String,
    /// Path of the pool's secret file.
    pub secret_file: PathBuf,
    /// Path of the file holding the user's token, which the server (the
    /// job's first process) presents to start the job: in a pool with
    /// tokens it needs power submit, and the job's owner is its identity.
    /// `None`: the server finds it as `carmi` does (`CARMI_TOKEN`, the
    /// embedded pool's, the config file's).
    pub token_file: Option<PathBuf>,
}

/// Everything [`Master::init`] needs besides the init data.
#[derive(Clone, Debug)]
pub struct MasterConfig {
    /// Resource classes with their desired host counts.
    pub classes: Vec<ClassSpec>,
    /// The worker executable (uploaded to pool hosts by CARMI).
    pub worker: PathBuf,
    /// Arguments for the worker (before WoDi's own `--wodi-connect=`).
    pub worker_args: Vec<String>,
    /// The server executable.
    pub server: ServerCommand,
    /// The pool; `None` takes `CARMI_LOCAL` and `CARMI_SECRET_FILE` from the environment.
    pub pool: Option<PoolAddr>,
    /// Steps in flight per worker.
    pub prefetch: u32,
    /// Adaptive prefetch: above `prefetch`, the most steps a worker may
    /// hold when its steps are short against the round trip to it; a
    /// worker with long steps keeps `prefetch` (see
    /// `wodi::sched::pace`). Default 1: no adaptation.
    pub prefetch_max: u32,
    /// Worker crashes a step may cause before it fails.
    pub max_attempts: u32,
    /// How long a suspended worker keeps its steps.
    pub suspend_timeout: Duration,
    /// How the server orders steps (default: longest first by history).
    pub ordering: crate::order::Ordering,
    /// Where host speeds come from (default: unknown, learned from observation).
    pub speed: SpeedSource,
    /// The benchmark step's data, for [`SpeedSource::Benchmark`]: every new
    /// worker's step handler computes it (step id
    /// [`crate::speed::BENCHMARK_STEP`]) before any real step.
    pub benchmark: Option<Bytes>,
    /// Whether observed step times correct host speeds (default: yes).
    pub refine_speed: bool,
    /// Learn step times from wall time rather than CPU time (default: no);
    /// for steps that wait rather than compute.
    pub learn_from_wall: bool,
    /// The scheduler's policies beyond the paper (default:
    /// [`Policies::keep_hosts`], which holds its hosts through short cycle
    /// tails rather than asking the pool again every cycle;
    /// [`Policies::recommended`] gives every idle host back;
    /// `Policies::default()` runs the paper's WoDi).
    pub policies: Policies,
    /// The checkpoint file: [`Master::checkpoint`] writes it, and a master
    /// started with an existing one resumes from it ([`Master::resume_point`]).
    pub checkpoint: Option<PathBuf>,
}

impl MasterConfig {
    /// One class of `count` hosts matching `requirements`, workers running
    /// `worker` with `args`; defaults for the rest (the current executable
    /// serves, pool from the environment, one step per worker, 3 attempts,
    /// 15 s suspension grace, the cost-aware [`Policies::keep_hosts`]).
    pub fn new(
        worker: impl Into<PathBuf>,
        args: Vec<String>,
        requirements: &str,
        count: u32,
    ) -> MasterConfig {
        MasterConfig {
            classes: vec![ClassSpec::new("workers", requirements, count)],
            worker: worker.into(),
            worker_args: args,
            server: ServerCommand::CurrentExe,
            pool: None,
            prefetch: 1,
            prefetch_max: 1,
            max_attempts: 3,
            // The grace `Policies::keep_hosts` was tuned with (wodi-sim's
            // `keep` preset): a suspended host is given back rather than
            // waited for, since the run holds few spare hosts.
            suspend_timeout: Duration::from_secs(15),
            ordering: crate::order::Ordering::LongestFirst,
            speed: SpeedSource::Unknown,
            benchmark: None,
            refine_speed: true,
            learn_from_wall: false,
            policies: Policies::keep_hosts(),
            checkpoint: None,
        }
    }
}

/// What became of one step.
#[derive(Clone, Debug, PartialEq)]
pub enum StepOutcome<R> {
    /// Its result (the first one; copies are never delivered).
    Done(StepId, R),
    /// It will never produce a result.
    Failed(StepId, String),
}

/// Why the master API failed.
#[derive(Debug, thiserror::Error)]
pub enum MasterError {
    /// The server could not be started or reached.
    #[error("starting the WoDi server: {0}")]
    Start(String),
    /// The server ended the run.
    #[error("the WoDi server stopped the run: {0}")]
    Fatal(String),
    /// The connection to the server is gone.
    #[error("lost the WoDi server: {0}")]
    Disconnected(String),
    /// Data could not be (de)serialized.
    #[error("step data: {0}")]
    Codec(#[from] serde_json::Error),
    /// The checkpoint file could not be read or written.
    #[error(transparent)]
    Checkpoint(#[from] CheckpointError),
}

enum FromServer {
    Msg(ToMaster, Bytes),
    Gone(Option<String>),
}

/// A running master-worker computation. Dropping it closes the connection
/// to the server, which then stops the workers and releases every host
/// (without returning statistics; use [`Master::complete`] for those).
pub struct Master {
    writer: Writer,
    events: mpsc::UnboundedReceiver<FromServer>,
    /// The server process, if this master started it.
    server: Option<tokio::process::Child>,
    addr: String,
    token: String,
    stats: Option<Stats>,
    /// The latest [`Status`] the server sent, kept by the reader task.
    status: watch::Receiver<Status>,
    /// The checkpoint file, and what it held when this master started.
    checkpoint: Option<PathBuf>,
    resumed: Option<Checkpoint>,
    /// Outcomes that arrived while waiting for another answer.
    pending: VecDeque<StepOutcome<Bytes>>,
}

/// Starts a server process and reads the address it listens on.
async fn spawn_server(
    exe: PathBuf,
    args: &[String],
    cfg: &MasterConfig,
) -> Result<(String, String, Option<tokio::process::Child>), MasterError> {
    let start = |e: String| MasterError::Start(e);
    let token = format!("{:032x}", rand::random::<u128>());
    // Its log goes through this process (`server_log`), never straight to
    // a terminal the application draws on.
    let (log_reader, log_writer) =
        std::io::pipe().map_err(|e| start(format!("a pipe for the server's log: {e}")))?;
    let mut cmd = tokio::process::Command::new(&exe);
    cmd.args(args)
        .env(crate::ENV_ROLE, "server")
        .env(crate::ENV_TOKEN, &token)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(log_writer)
        // Out of the master's process group, so that Ctrl-C on a terminal
        // reaches the master only. The server stops when its master goes
        // (it stops the workers and releases the hosts first); killed by
        // the same SIGINT, it vanished under a master that was still
        // shutting down, which then failed with "lost the WoDi server".
        .process_group(0);
    if let Some(pool) = &cfg.pool {
        cmd.env(carmi_api::client::ENV_LOCAL, &pool.local)
            .env(carmi_api::client::ENV_SECRET_FILE, &pool.secret_file);
        if let Some(token) = &pool.token_file {
            cmd.env(carmi_api::coords::ENV_TOKEN, token);
        }
    }
    let mut server = cmd
        .spawn()
        .map_err(|e| start(format!("{}: {e}", exe.display())))?;
    // The child holds the write end now: the log ends when the server does.
    drop(cmd);
    crate::server_log::forward(log_reader);
    let stdout = server.stdout.take().expect("stdout is piped");
    let mut line = String::new();
    let read = tokio::time::timeout(
        Duration::from_secs(60),
        BufReader::new(stdout).read_line(&mut line),
    )
    .await;
    let addr = match read {
        Ok(Ok(n)) if n > 0 => line
            .trim()
            .strip_prefix("listening on ")
            .map(str::to_string)
            .ok_or_else(|| start(format!("{} printed {line:?}", exe.display())))?,
        Ok(_) => {
            let status = server.wait().await.ok();
            return Err(start(format!(
                "{} exited ({status:?}) before reporting its address; see its stderr",
                exe.display()
            )));
        }
        Err(_) => return Err(start("no address within 60 s".into())),
    };
    Ok((addr, token, Some(server)))
}

impl Master {
    /// Starts the server and the run with `init` (JSON) as every worker's init data.
    pub async fn init<T: Serialize>(cfg: MasterConfig, init: &T) -> Result<Master, MasterError> {
        Master::init_raw(cfg, Bytes::from(serde_json::to_vec(init)?)).await
    }

    /// Starts the server and the run with raw init data.
    pub async fn init_raw(cfg: MasterConfig, init: Bytes) -> Result<Master, MasterError> {
        let start = |e: String| MasterError::Start(e);
        let resumed = match &cfg.checkpoint {
            Some(path) => Checkpoint::load(path)?,
            None => None,
        };
        let (addr, token, server) = match &cfg.server {
            ServerCommand::Connect { addr, token } => (addr.clone(), token.clone(), None),
            ServerCommand::CurrentExe => {
                let exe = std::env::current_exe()
                    .map_err(|e| start(format!("path of this executable: {e}")))?;
                spawn_server(exe, &[], &cfg).await?
            }
            ServerCommand::Path(p) => spawn_server(p.clone(), &[], &cfg).await?,
            ServerCommand::Command { program, args } => {
                spawn_server(program.clone(), args, &cfg).await?
            }
        };
        let stream = carmi_api::net::dial(&addr, carmi_api::net::CONNECT_TIMEOUT)
            .await
            .map_err(|e| start(format!("connecting to {addr}: {e}")))?;
        let (r, w) = stream.into_split();
        let writer = spawn_writer(w);
        let (tx, events) = mpsc::unbounded_channel();
        let (status_tx, status) = watch::channel(Status::default());
        // The reader keeps the status current even while the application
        // is not reading results (a progress display may poll it any time).
        spawn_reader(
            ConnReader::with_max(r, crate::proto::MAX_FRAME),
            tx,
            move |msg, payload| {
                if let ToMaster::Status(st) = &msg {
                    status_tx.send_replace(*st);
                }
                FromServer::Msg(msg, payload)
            },
            FromServer::Gone,
        );
        let hello = Hello {
            version: WODI_PROTOCOL,
            token: token.clone(),
            role: HelloRole::Master,
        };
        let _ = writer.send(Outgoing::new(&hello, Bytes::new()));
        let msg = FromMaster::Init {
            classes: cfg.classes,
            executable: cfg.worker.to_string_lossy().into_owned(),
            args: cfg.worker_args,
            prefetch: cfg.prefetch,
            prefetch_max: cfg.prefetch_max,
            max_attempts: cfg.max_attempts,
            suspend_timeout_ms: cfg.suspend_timeout.as_millis() as u64,
            ordering: cfg.ordering,
            speed: cfg.speed,
            refine_speed: cfg.refine_speed,
            learn_from_wall: cfg.learn_from_wall,
            policies: cfg.policies,
        };
        let _ = writer.send(Outgoing::new(&msg, init));
        if let Some(data) = cfg.benchmark {
            let _ = writer.send(Outgoing::new(&FromMaster::Benchmark, data));
        }
        if let Some(cp) = &resumed {
            let json = serde_json::to_vec(&cp.history)?;
            let _ = writer.send(Outgoing::new(
                &FromMaster::RestoreHistory,
                Bytes::from(json),
            ));
        }
        let mut master = Master {
            writer,
            events,
            server,
            addr,
            token,
            stats: None,
            status,
            checkpoint: cfg.checkpoint,
            resumed,
            pending: VecDeque::new(),
        };
        match master.next().await? {
            (ToMaster::Ready, _) => Ok(master),
            (other, _) => Err(start(format!("the server answered {other:?}"))),
        }
    }

    /// Where a restarted master resumes: the last cycle it had completed
    /// when it called [`Master::checkpoint`], and the state it saved then
    /// (decoded from JSON). `None` on a fresh start (no checkpoint file).
    pub fn resume_point<T: DeserializeOwned>(&self) -> Result<Option<(CycleId, T)>, MasterError> {
        match self.resume_point_raw() {
            Some((c, state)) => Ok(Some((c, serde_json::from_slice(&state)?))),
            None => Ok(None),
        }
    }

    /// [`Master::resume_point`] with the raw state.
    pub fn resume_point_raw(&self) -> Option<(CycleId, Bytes)> {
        self.resumed
            .as_ref()
            .map(|cp| (cp.cycle, Bytes::from(cp.state.clone())))
    }

    /// Records that `cycle` is complete (the application has all its
    /// results) with the application's `state` (JSON) at that point: writes
    /// the checkpoint file atomically, with WoDi's step history. A master
    /// restarted with the same [`MasterConfig::checkpoint`] resumes after
    /// `cycle`. Does nothing without a checkpoint file.
    pub async fn checkpoint<T: Serialize>(
        &mut self,
        cycle: CycleId,
        state: &T,
    ) -> Result<(), MasterError> {
        self.checkpoint_raw(cycle, Bytes::from(serde_json::to_vec(state)?))
            .await
    }

    /// [`Master::checkpoint`] with raw state.
    pub async fn checkpoint_raw(
        &mut self,
        cycle: CycleId,
        state: Bytes,
    ) -> Result<(), MasterError> {
        let Some(path) = self.checkpoint.clone() else {
            return Ok(());
        };
        let history = self.history().await?;
        let cp = Checkpoint {
            format: CHECKPOINT_FORMAT,
            cycle,
            state: state.to_vec(),
            history,
        };
        cp.save(&path)?;
        Ok(())
    }

    /// WoDi's step history as it stands (estimates in seconds on a speed-1
    /// host). Outcomes arriving meanwhile are kept for [`Master::recv_result`].
    pub async fn history(&mut self) -> Result<Vec<SavedEstimate>, MasterError> {
        self.send(&FromMaster::GetHistory, Bytes::new());
        Ok(loop {
            match self.next().await? {
                (ToMaster::History, data) => break serde_json::from_slice(&data)?,
                (ToMaster::Result { step }, data) => {
                    self.pending.push_back(StepOutcome::Done(step, data))
                }
                (ToMaster::StepFailed { step, reason }, _) => {
                    self.pending.push_back(StepOutcome::Failed(step, reason))
                }
                (ToMaster::Stats, data) => self.stats = serde_json::from_slice(&data).ok(),
                (ToMaster::Ready | ToMaster::Fatal { .. } | ToMaster::Status(_), _) => {}
            }
        })
    }

    /// Where this master's server listens and its run token, for another
    /// master to share it with [`ServerCommand::Connect`].
    pub fn server(&self) -> (String, String) {
        (self.addr.clone(), self.token.clone())
    }

    /// The run's hosts and steps as the server last reported them (it
    /// reports changes a few times a second). All zero until the first report.
    pub fn status(&self) -> Status {
        *self.status.borrow()
    }

    /// A receiver that wakes on every status report, for a progress display
    /// running beside the code that sends work and reads results.
    pub fn watch_status(&self) -> watch::Receiver<Status> {
        self.status.clone()
    }

    fn send(&self, msg: &FromMaster, payload: Bytes) {
        // A dead connection shows up on the receiving side.
        let _ = self.writer.send(Outgoing::new(msg, payload));
    }

    async fn next(&mut self) -> Result<(ToMaster, Bytes), MasterError> {
        match self.events.recv().await {
            Some(FromServer::Msg(ToMaster::Fatal { reason }, _)) => Err(MasterError::Fatal(reason)),
            Some(FromServer::Msg(m, p)) => Ok((m, p)),
            Some(FromServer::Gone(why)) => {
                Err(MasterError::Disconnected(why.unwrap_or_else(|| {
                    "the server closed the connection".into()
                })))
            }
            None => Err(MasterError::Disconnected("the reader stopped".into())),
        }
    }

    /// Begins a cycle; `data` (JSON) goes to every worker before its first step of the cycle.
    pub fn begin_cycle<T: Serialize>(
        &mut self,
        cycle: CycleId,
        data: &T,
    ) -> Result<(), MasterError> {
        self.begin_cycle_raw(cycle, Bytes::from(serde_json::to_vec(data)?));
        Ok(())
    }

    /// [`Master::begin_cycle`] with raw data.
    pub fn begin_cycle_raw(&mut self, cycle: CycleId, data: Bytes) {
        self.send(&FromMaster::BeginCycle { cycle }, data);
    }

    /// Ends a cycle; `data` (JSON) goes to every current worker.
    pub fn end_cycle<T: Serialize>(&mut self, cycle: CycleId, data: &T) -> Result<(), MasterError> {
        self.end_cycle_raw(cycle, Bytes::from(serde_json::to_vec(data)?));
        Ok(())
    }

    /// [`Master::end_cycle`] with raw data.
    pub fn end_cycle_raw(&mut self, cycle: CycleId, data: Bytes) {
        self.send(&FromMaster::EndCycle { cycle }, data);
    }

    /// Submits a step with data encoded as JSON.
    pub fn send_work<T: Serialize>(&mut self, step: StepId, data: &T) -> Result<(), MasterError> {
        self.send_work_raw(step, Bytes::from(serde_json::to_vec(data)?));
        Ok(())
    }

    /// Submits a step with raw data.
    pub fn send_work_raw(&mut self, step: StepId, data: Bytes) {
        self.send(&FromMaster::Step { step }, data);
    }

    /// The next step outcome, its result decoded from JSON.
    pub async fn recv_result<R: DeserializeOwned>(
        &mut self,
    ) -> Result<StepOutcome<R>, MasterError> {
        Ok(match self.recv_result_raw().await? {
            StepOutcome::Done(s, data) => StepOutcome::Done(s, serde_json::from_slice(&data)?),
            StepOutcome::Failed(s, why) => StepOutcome::Failed(s, why),
        })
    }

    /// The next step outcome with the raw result.
    pub async fn recv_result_raw(&mut self) -> Result<StepOutcome<Bytes>, MasterError> {
        if let Some(o) = self.pending.pop_front() {
            return Ok(o);
        }
        loop {
            match self.next().await? {
                (ToMaster::Result { step }, data) => return Ok(StepOutcome::Done(step, data)),
                (ToMaster::StepFailed { step, reason }, _) => {
                    return Ok(StepOutcome::Failed(step, reason));
                }
                (ToMaster::Stats, data) => self.stats = serde_json::from_slice(&data).ok(),
                (
                    ToMaster::Ready
                    | ToMaster::Fatal { .. }
                    | ToMaster::History
                    | ToMaster::Status(_),
                    _,
                ) => {}
            }
        }
    }

    /// Ends the run: the server stops the workers, releases every host and
    /// returns the statistics; then it exits.
    pub async fn complete(mut self) -> Result<Stats, MasterError> {
        self.send(&FromMaster::Complete, Bytes::new());
        while self.stats.is_none() {
            match self.next().await? {
                (ToMaster::Stats, data) => self.stats = Some(serde_json::from_slice(&data)?),
                _ => continue,
            }
        }
        drop(self.writer);
        // A server this master started exits once its last master has gone.
        if let Some(server) = &mut self.server {
            let _ = tokio::time::timeout(Duration::from_secs(10), server.wait()).await;
        }
        Ok(self.stats.take().expect("stats were received"))
    }
}
