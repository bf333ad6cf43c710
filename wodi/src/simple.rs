//! The simple surface: a parallel `map` over the pool without async code,
//! step ids or outcome matching.
//!
//! ```no_run
//! fn square(x: u64) -> anyhow::Result<u64> {
//!     Ok(x * x)
//! }
//!
//! fn main() -> anyhow::Result<()> {
//!     wodi::serve(square); // in a worker WoDi started: serves `square`, then exits
//!     let mut pool = wodi::Pool::builder().hosts(4).start()?;
//!     let squares: Vec<u64> = pool.map(0..100u64)?;
//!     println!("{squares:?}, efficiency {:.0}%", pool.close()?.efficiency * 100.0);
//!     Ok(())
//! }
//! ```
//!
//! Each [`Pool::map`] (or [`Pool::stream`]) call is one WoDi cycle: step `i`
//! is the cycle's `i`-th input, so that the history learned in one cycle
//! orders the next one longest-first, as in the full [`crate::master`] API,
//! which this module drives (same scheduling, exactly-once delivery, speed
//! placement). [`PoolBuilder::configure`] reaches every setting of
//! [`MasterConfig`].

use std::fmt::Display;
use std::marker::PhantomData;
use std::path::PathBuf;
use std::sync::Arc;

use bytes::Bytes;
use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::ids::{CycleId, StepId};
use crate::master::{Master, MasterConfig, MasterError, PoolAddr, StepOutcome};
use crate::stats::Stats;
use crate::worker::{Worker, started_as_worker};

/// The executable's one-line dual role: call first in `main`. In the WoDi
/// server, runs the server and exits; in a worker WoDi started, serves
/// steps with `f` (a step's input in, its result or any displayable error
/// out) and exits; in the master, returns at once.
pub fn serve<T, R, E, F>(f: F)
where
    T: DeserializeOwned,
    R: Serialize,
    E: Display,
    F: FnMut(T) -> Result<R, E> + 'static,
{
    crate::enter();
    if started_as_worker() {
        serve_worker(Worker::new().on_input(f));
    }
}

/// [`serve`] with a worker of several handlers (init data, cycle data,
/// steps that want their ids): in a worker WoDi started, runs `worker` and
/// exits; otherwise (after [`crate::enter`]) returns at once.
pub fn serve_worker(worker: Worker) {
    crate::enter();
    if !started_as_worker() {
        return;
    }
    let code = match worker.run() {
        Ok(()) => 0,
        Err(e) => {
            eprintln!("wodi worker: {e:#}");
            1
        }
    };
    std::process::exit(code);
}

/// Why a [`Pool`] call failed.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The run itself failed (start, server lost, ...).
    #[error(transparent)]
    Master(#[from] MasterError),
    /// A step's handler returned an error, or its result did not decode.
    #[error("step {index} failed on input {input}: {reason}")]
    Step {
        /// The step's position among the call's inputs.
        index: usize,
        /// The input, as JSON (cut after 200 characters).
        input: String,
        /// The handler's error message.
        reason: String,
    },
    /// The blocking facade's runtime could not start.
    #[error("starting the runtime: {0}")]
    Runtime(#[from] std::io::Error),
}

/// Builds a [`Pool`]: 4 hosts of any kind, workers running this executable,
/// the pool found as `carmi` finds it, no init data, and the defaults of
/// [`MasterConfig::new`] for the rest.
pub struct PoolBuilder {
    cfg: MasterConfig,
    init: Result<Bytes, serde_json::Error>,
}

impl PoolBuilder {
    /// How many hosts to keep (of the first resource class).
    pub fn hosts(mut self, count: u32) -> Self {
        self.cfg.classes[0].count = count;
        self
    }

    /// The ClassAd requirements hosts must meet (default `true`).
    pub fn requirements(mut self, expr: &str) -> Self {
        self.cfg.classes[0].requirements = expr.to_string();
        self
    }

    /// Another worker executable and its arguments (default: this
    /// executable, which calls [`serve`]).
    pub fn worker(mut self, exe: impl Into<PathBuf>, args: Vec<String>) -> Self {
        self.cfg.worker = exe.into();
        self.cfg.worker_args = args;
        self
    }

    /// An explicit pool: its local RM's `host:port` and secret file.
    pub fn pool(mut self, local: &str, secret_file: impl Into<PathBuf>) -> Self {
        self.cfg.pool = Some(PoolAddr {
            local: local.to_string(),
            secret_file: secret_file.into(),
            token_file: None,
        });
        self
    }

    /// The user's token file for the pool set by [`Self::pool`] (else the
    /// server finds it as `carmi` does: `CARMI_TOKEN`, ...).
    pub fn pool_token(mut self, token_file: impl Into<PathBuf>) -> Self {
        if let Some(pool) = &mut self.cfg.pool {
            pool.token_file = Some(token_file.into());
        }
        self
    }

    /// Init data (JSON) every worker gets before its first step.
    pub fn init<T: Serialize>(mut self, data: &T) -> Self {
        self.init = serde_json::to_vec(data).map(Bytes::from);
        self
    }

    /// Init data as bytes, sent as they are (for bindings with their own encoding).
    pub fn init_raw(mut self, data: Bytes) -> Self {
        self.init = Ok(data);
        self
    }

    /// Any other setting of the full configuration.
    pub fn configure(mut self, f: impl FnOnce(&mut MasterConfig)) -> Self {
        f(&mut self.cfg);
        self
    }

    /// Starts the WoDi server and the run; returns once the server is ready
    /// (hosts arrive while the first steps wait).
    pub fn start(self) -> Result<Pool, Error> {
        let mut cfg = self.cfg;
        if cfg.worker.as_os_str().is_empty() {
            cfg.worker = std::env::current_exe().map_err(|e| {
                MasterError::Start(format!("path of this executable (the worker): {e}"))
            })?;
        }
        let init = self.init.map_err(MasterError::Codec)?;
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?;
        let master = rt.block_on(Master::init_raw(cfg, init))?;
        Ok(Pool {
            rt,
            master,
            next_cycle: 0,
            open: None,
            wake: Wake::default(),
        })
    }
}

/// A running WoDi computation behind blocking calls. Dropping it stops the
/// workers and releases the hosts; [`Pool::close`] also returns statistics.
pub struct Pool {
    rt: tokio::runtime::Runtime,
    master: Master,
    next_cycle: u64,
    open: Option<OpenCycle>,
    wake: Wake,
}

/// Interrupts a [`Pool::next_raw_or_wake`] wait from any thread: callers
/// whose steps arrive one at a time (the Python package's executor) add
/// them while the thread that owns the pool waits for results, and a new
/// step must not wait for some older step's result to be sent.
#[derive(Clone, Debug, Default)]
pub struct Wake(Arc<tokio::sync::Notify>);

impl Wake {
    /// Ends the current wait, or the next one if none is under way (a wake
    /// is never lost; several before one wait count once).
    pub fn wake(&self) {
        self.0.notify_one();
    }
}

/// One step's outcome in a raw cycle ([`Pool::next_raw`]): its input's
/// index, and its result's bytes or the handler's error message.
pub type RawOutcome = (usize, Result<Bytes, String>);

/// The cycle last begun: its inputs (for error messages) and which of its
/// steps are still out.
struct OpenCycle {
    cycle: CycleId,
    inputs: Vec<Bytes>,
    seen: Vec<bool>,
    remaining: usize,
    ended: bool,
}

impl Pool {
    /// A builder with the defaults (see [`PoolBuilder`]).
    pub fn builder() -> PoolBuilder {
        PoolBuilder {
            cfg: MasterConfig::new(PathBuf::new(), Vec::new(), "true", 4),
            init: Ok(Bytes::from_static(b"null")),
        }
    }

    /// Runs one cycle: every input becomes a step, and the results come back
    /// in input order. If steps fail, the first failure (by arrival) is
    /// returned once the cycle's other steps have come back.
    pub fn map<T: Serialize, R: DeserializeOwned>(
        &mut self,
        inputs: impl IntoIterator<Item = T>,
    ) -> Result<Vec<R>, Error> {
        let mut stream = self.stream(inputs)?;
        let n = stream.pool.open.as_ref().map_or(0, |o| o.inputs.len());
        let mut out: Vec<Option<R>> = (0..n).map(|_| None).collect();
        let mut first_error = None;
        for item in &mut stream {
            match item {
                Ok((i, r)) => out[i] = Some(r),
                Err(e @ Error::Step { .. }) => {
                    first_error.get_or_insert(e);
                }
                Err(e) => return Err(e),
            }
        }
        match first_error {
            Some(e) => Err(e),
            None => Ok(out.into_iter().flatten().collect()),
        }
    }

    /// Runs one cycle like [`Pool::map`], yielding `(input index, result)`
    /// as results arrive. Dropping the stream early waits for the cycle's
    /// remaining steps (and discards them), so that the next cycle starts clean.
    pub fn stream<T: Serialize, R: DeserializeOwned>(
        &mut self,
        inputs: impl IntoIterator<Item = T>,
    ) -> Result<Stream<'_, R>, Error> {
        let mut encoded = Vec::new();
        for input in inputs {
            encoded.push(Bytes::from(
                serde_json::to_vec(&input).map_err(MasterError::Codec)?,
            ));
        }
        self.begin_raw(encoded);
        Ok(Stream {
            pool: self,
            _result: PhantomData,
        })
    }

    /// Begins a cycle of steps whose data are given as bytes (no JSON), for
    /// bindings that encode data their own way (the Python package);
    /// [`Pool::next_raw`] then yields the outcomes. A cycle still open is
    /// first waited for and its remaining outcomes discarded.
    pub fn begin_raw(&mut self, inputs: Vec<Bytes>) {
        while self.next_raw().is_some() {}
        let cycle = CycleId(self.next_cycle);
        self.next_cycle += 1;
        self.master
            .begin_cycle_raw(cycle, Bytes::from_static(b"null"));
        for (i, data) in inputs.iter().enumerate() {
            self.master.send_work_raw(StepId(i as u64), data.clone());
        }
        self.open = Some(OpenCycle {
            cycle,
            seen: vec![false; inputs.len()],
            remaining: inputs.len(),
            inputs,
            ended: false,
        });
        // A cycle of no steps is over at once.
        self.end_if_done();
    }

    /// The next outcome of the cycle [`Pool::begin_raw`] (or
    /// [`Pool::stream`]) began, as it arrives: the step's input index and
    /// its result bytes or the handler's error message; `None` once every
    /// step of the cycle is in (or none is open). Blocks until one arrives.
    pub fn next_raw(&mut self) -> Option<Result<RawOutcome, Error>> {
        while self.open.as_ref()?.remaining > 0 {
            let outcome = self.rt.block_on(self.master.recv_result_raw());
            if let Some(accepted) = self.accept(outcome) {
                return Some(accepted);
            }
        }
        None
    }

    /// Adds steps to the open cycle, or begins a cycle with them when none
    /// is open (or the open one is over): for callers whose steps arrive
    /// one at a time rather than a cycle at once. Returns the first new
    /// step's index in its cycle (0 when a cycle was begun; 0 and nothing
    /// sent for no inputs). The cycle ends, as with [`Pool::begin_raw`],
    /// once all its steps are in; the next call then begins another.
    pub fn extend_raw(&mut self, inputs: Vec<Bytes>) -> usize {
        if inputs.is_empty() {
            return 0;
        }
        if !matches!(&self.open, Some(open) if !open.ended) {
            let cycle = CycleId(self.next_cycle);
            self.next_cycle += 1;
            self.master
                .begin_cycle_raw(cycle, Bytes::from_static(b"null"));
            self.open = Some(OpenCycle {
                cycle,
                inputs: Vec::new(),
                seen: Vec::new(),
                remaining: 0,
                ended: false,
            });
        }
        let Some(open) = self.open.as_mut() else {
            return 0; // just set above
        };
        let first = open.inputs.len();
        for (k, data) in inputs.into_iter().enumerate() {
            self.master
                .send_work_raw(StepId((first + k) as u64), data.clone());
            open.inputs.push(data);
            open.seen.push(false);
            open.remaining += 1;
        }
        first
    }

    /// [`Pool::next_raw`], but returning `Ok(None)` as soon as the pool's
    /// [`Wake`] is woken (at once if it was woken since the last wait),
    /// so that the caller can add steps ([`Pool::extend_raw`]) and wait
    /// again. With no step out it waits for a wake only.
    pub fn next_raw_or_wake(&mut self) -> Result<Option<RawOutcome>, Error> {
        let wake = Arc::clone(&self.wake.0);
        loop {
            if self.open.as_ref().is_none_or(|o| o.remaining == 0) {
                self.rt.block_on(wake.notified());
                return Ok(None);
            }
            let master = &mut self.master;
            let outcome = self.rt.block_on(async {
                tokio::select! {
                    // Results first: a burst of wakes must not starve them.
                    biased;
                    outcome = master.recv_result_raw() => Some(outcome),
                    () = wake.notified() => None,
                }
            });
            let Some(outcome) = outcome else {
                return Ok(None);
            };
            if let Some(accepted) = self.accept(outcome) {
                return accepted.map(Some);
            }
        }
    }

    /// An outcome already received, without waiting (`None` if none is
    /// in): lets a caller take a burst of results in one go.
    pub fn try_next_raw(&mut self) -> Option<Result<RawOutcome, Error>> {
        while self.open.as_ref()?.remaining > 0 {
            let master = &mut self.master;
            let outcome = self.rt.block_on(async {
                tokio::select! {
                    biased;
                    outcome = master.recv_result_raw() => Some(outcome),
                    () = std::future::ready(()) => None,
                }
            })?;
            if let Some(accepted) = self.accept(outcome) {
                return Some(accepted);
            }
        }
        None
    }

    /// The handle that interrupts [`Pool::next_raw_or_wake`] (clones share it).
    pub fn waker(&self) -> Wake {
        self.wake.clone()
    }

    /// One outcome received for the open cycle: the step's index and
    /// result, or the error that ended the run; `None` for an outcome of
    /// no waiting step (ignored).
    fn accept(
        &mut self,
        outcome: Result<StepOutcome<Bytes>, MasterError>,
    ) -> Option<Result<RawOutcome, Error>> {
        let open = self.open.as_mut()?;
        let outcome = match outcome {
            Ok(o) => o,
            Err(e) => {
                // The run is gone: nothing more will arrive.
                open.remaining = 0;
                open.ended = true;
                return Some(Err(e.into()));
            }
        };
        let (step, result) = match outcome {
            StepOutcome::Done(s, data) => (s.0 as usize, Ok(data)),
            StepOutcome::Failed(s, why) => (s.0 as usize, Err(why)),
        };
        // WoDi delivers each step once; anything else is not this cycle's.
        if step >= open.seen.len() || open.seen[step] {
            tracing::warn!(%step, cycle = %open.cycle, "an outcome of no waiting step, ignored");
            return None;
        }
        open.seen[step] = true;
        open.remaining -= 1;
        self.end_if_done();
        Some(Ok((step, result)))
    }

    /// Tells the server the open cycle is over once all its steps are in.
    fn end_if_done(&mut self) {
        if let Some(open) = self.open.as_mut().filter(|o| o.remaining == 0 && !o.ended) {
            open.ended = true;
            self.master
                .end_cycle_raw(open.cycle, Bytes::from_static(b"null"));
        }
    }

    /// A step error of the open cycle, naming the step's input.
    fn step_error(&self, index: usize, reason: String) -> Error {
        let data = self.open.as_ref().and_then(|o| o.inputs.get(index));
        let mut input = data.map_or_else(String::new, |d| String::from_utf8_lossy(d).into_owned());
        if input.chars().count() > 200 {
            input = input.chars().take(200).chain("...".chars()).collect();
        }
        Error::Step {
            index,
            input,
            reason,
        }
    }

    /// The run's hosts and steps as the server last reported them.
    pub fn status(&self) -> crate::Status {
        self.master.status()
    }

    /// Ends the run: stops the workers, releases the hosts, returns the statistics.
    pub fn close(self) -> Result<Stats, Error> {
        let Pool { rt, master, .. } = self;
        Ok(rt.block_on(master.complete())?)
    }
}

/// Results of one cycle as they arrive (see [`Pool::stream`]).
pub struct Stream<'p, R> {
    pool: &'p mut Pool,
    _result: PhantomData<fn() -> R>,
}

impl<R: DeserializeOwned> Iterator for Stream<'_, R> {
    type Item = Result<(usize, R), Error>;

    fn next(&mut self) -> Option<Self::Item> {
        Some(match self.pool.next_raw()? {
            Err(e) => Err(e),
            Ok((i, Ok(data))) => serde_json::from_slice(&data).map(|r| (i, r)).map_err(|e| {
                self.pool
                    .step_error(i, format!("its result does not decode: {e}"))
            }),
            Ok((i, Err(why))) => Err(self.pool.step_error(i, why)),
        })
    }
}

impl<R> Drop for Stream<'_, R> {
    fn drop(&mut self) {
        while self.pool.next_raw().is_some() {}
    }
}
