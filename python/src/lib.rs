//! The native half of the Python package `wodi`: a blocking [`wodi::Pool`]
//! whose steps carry opaque bytes (the Python side pickles a function and
//! its input, or hands a command worker its own bytes), the worker loops
//! that hand each step to a Python callable or run it as a shell command,
//! and the server role (`python -m wodi._server`), and the whole `carmi`
//! command (`python -m wodi._carmi`), which starts the embedded pool where
//! no `carmi` is installed.

use bytes::Bytes;
use pyo3::exceptions::PyRuntimeError;
use pyo3::prelude::*;
use pyo3::pybacked::PyBackedBytes;
use pyo3::types::PyBytes;

use wodi::master::ServerCommand;
use wodi::simple::RawOutcome;

fn runtime_error(e: impl std::fmt::Display) -> PyErr {
    PyRuntimeError::new_err(format!("{e:#}"))
}

/// A running WoDi computation (see `wodi.Pool` for the Python surface).
/// Step data and results travel as the frames' payload bytes, as the Python
/// side gives them (pickles, or a command worker's own bytes).
#[pyclass(unsendable)]
struct NativePool {
    pool: Option<wodi::Pool>,
}

impl NativePool {
    fn pool(&mut self) -> PyResult<&mut wodi::Pool> {
        self.pool
            .as_mut()
            .ok_or_else(|| runtime_error("the pool is closed"))
    }
}

/// An outcome for Python: `(index, True, result bytes)` or `(index, False, reason)`.
type PyOutcome = (usize, bool, PyObject);

fn to_py(py: Python<'_>, (index, result): RawOutcome) -> PyOutcome {
    match result {
        Ok(data) => (index, true, PyBytes::new(py, &data).into_any().unbind()),
        Err(why) => (
            index,
            false,
            why.into_pyobject(py)
                .map_or_else(|_| py.None(), |s| s.into_any().unbind()),
        ),
    }
}

#[pymethods]
impl NativePool {
    /// Starts the server (`server` with `server_args`) and the run: `hosts`
    /// workers running `worker` with `worker_args` on hosts matching
    /// `requirements`, each given `init` (bytes) first; the pool from
    /// `local`/`secret` or found as `carmi` finds it. `prefetch`: steps in
    /// hand per worker (more hides the round trip to the server for short
    /// steps); `prefetch_max`, when above it: the most a worker holds once
    /// its steps prove short against that round trip (the server adapts
    /// each worker's share between the two); `arrival_order`: steps go out
    /// in the order sent (an executor's unrelated calls) rather than
    /// longest first by history.
    #[new]
    #[pyo3(signature = (worker, worker_args, hosts, requirements, server, server_args, local=None, secret=None, init=None, prefetch=1, arrival_order=false, prefetch_max=1))]
    #[allow(clippy::too_many_arguments)]
    fn new(
        py: Python<'_>,
        worker: String,
        worker_args: Vec<String>,
        hosts: u32,
        requirements: String,
        server: String,
        server_args: Vec<String>,
        local: Option<String>,
        secret: Option<String>,
        init: Option<PyBackedBytes>,
        prefetch: u32,
        arrival_order: bool,
        prefetch_max: u32,
    ) -> PyResult<Self> {
        let mut builder = wodi::Pool::builder()
            .hosts(hosts)
            .requirements(&requirements)
            .worker(worker, worker_args)
            .configure(|cfg| {
                cfg.server = ServerCommand::Command {
                    program: server.into(),
                    args: server_args,
                };
                cfg.prefetch = prefetch.max(1);
                cfg.prefetch_max = prefetch_max;
                if arrival_order {
                    cfg.ordering = wodi::order::Ordering::Arrival;
                }
            });
        if let Some(init) = init {
            builder = builder.init_raw(Bytes::copy_from_slice(&init));
        }
        if let (Some(local), Some(secret)) = (local, secret) {
            builder = builder.pool(&local, secret);
        }
        let pool = py
            .allow_threads(|| builder.start())
            .map_err(runtime_error)?;
        Ok(NativePool { pool: Some(pool) })
    }

    /// Runs one cycle; returns, in input order, `(True, result)` or
    /// `(False, reason)` per input.
    fn map(
        &mut self,
        py: Python<'_>,
        inputs: Vec<PyBackedBytes>,
    ) -> PyResult<Vec<(bool, PyObject)>> {
        let n = inputs.len();
        let inputs = inputs.iter().map(|b| Bytes::copy_from_slice(b)).collect();
        let pool = self.pool()?;
        let outcomes = py.allow_threads(|| -> Result<Vec<RawOutcome>, wodi::simple::Error> {
            pool.begin_raw(inputs);
            let mut out = Vec::with_capacity(n);
            while let Some(item) = pool.next_raw() {
                out.push(item?);
            }
            Ok(out)
        });
        let mut ordered: Vec<(bool, PyObject)> = (0..n).map(|_| (false, py.None())).collect();
        for outcome in outcomes.map_err(runtime_error)? {
            let (i, ok, data) = to_py(py, outcome);
            ordered[i] = (ok, data);
        }
        Ok(ordered)
    }

    /// Begins a cycle whose outcomes [`NativePool::next`] yields as they
    /// arrive (a cycle still open is first finished, its outcomes dropped).
    fn begin(&mut self, py: Python<'_>, inputs: Vec<PyBackedBytes>) -> PyResult<()> {
        let inputs = inputs.iter().map(|b| Bytes::copy_from_slice(b)).collect();
        let pool = self.pool()?;
        py.allow_threads(|| pool.begin_raw(inputs));
        Ok(())
    }

    /// The next outcome of the open cycle, `(index, ok, data)`, or `None`
    /// once all are in.
    fn next(&mut self, py: Python<'_>) -> PyResult<Option<PyOutcome>> {
        let pool = self.pool()?;
        match py.allow_threads(|| pool.next_raw()) {
            None => Ok(None),
            Some(Err(e)) => Err(runtime_error(e)),
            Some(Ok(outcome)) => Ok(Some(to_py(py, outcome))),
        }
    }

    /// Adds steps to the open cycle (or begins one); returns the first new
    /// step's index in its cycle, 0 when a cycle was begun (see
    /// `wodi::Pool::extend_raw`).
    fn extend(&mut self, py: Python<'_>, inputs: Vec<PyBackedBytes>) -> PyResult<usize> {
        let inputs = inputs.iter().map(|b| Bytes::copy_from_slice(b)).collect();
        let pool = self.pool()?;
        Ok(py.allow_threads(|| pool.extend_raw(inputs)))
    }

    /// The outcomes in, `(index, ok, data)` each: waits for one, then takes
    /// those already received too (up to `max`); empty once the pool's
    /// waker is woken (see [`NativePool::waker`]). With no step out, waits
    /// for a wake only.
    #[pyo3(signature = (max=1024))]
    fn next_or_wake(&mut self, py: Python<'_>, max: usize) -> PyResult<Vec<PyOutcome>> {
        let pool = self.pool()?;
        let outcomes = py.allow_threads(|| -> Result<Vec<RawOutcome>, wodi::simple::Error> {
            let Some(first) = pool.next_raw_or_wake()? else {
                return Ok(Vec::new());
            };
            let mut out = vec![first];
            while out.len() < max {
                match pool.try_next_raw() {
                    Some(outcome) => out.push(outcome?),
                    None => break,
                }
            }
            Ok(out)
        });
        Ok(outcomes
            .map_err(runtime_error)?
            .into_iter()
            .map(|o| to_py(py, o))
            .collect())
    }

    /// The handle that ends a [`NativePool::next_or_wake`] wait from any thread.
    fn waker(&mut self) -> PyResult<Waker> {
        Ok(Waker(self.pool()?.waker()))
    }

    /// Ends the run; returns the statistics as JSON.
    fn close(&mut self, py: Python<'_>) -> PyResult<String> {
        match self.pool.take() {
            Some(pool) => {
                let stats = py.allow_threads(|| pool.close()).map_err(runtime_error)?;
                Ok(wodi_stats_json(&stats))
            }
            None => Ok("null".into()),
        }
    }
}

/// Ends a `NativePool.next_or_wake` wait; usable from any thread (the
/// pool itself belongs to the thread that made it).
#[pyclass(frozen)]
struct Waker(wodi::simple::Wake);

#[pymethods]
impl Waker {
    /// Ends the pool's current wait for an outcome, or its next one.
    fn wake(&self) {
        self.0.wake();
    }
}

fn wodi_stats_json(stats: &wodi::Stats) -> String {
    // Statistics are plain numbers and strings: serializing cannot fail.
    format!("{}", WodiJson(stats))
}

/// Display as JSON, without a direct serde_json dependency of this crate.
struct WodiJson<'a>(&'a wodi::Stats);

impl std::fmt::Display for WodiJson<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{{\"steps_delivered\": {}, \"efficiency\": {}, \"cpu_efficiency\": {}, \"hosts_added\": {}, \"hosts_lost\": {}, \"step_copies\": {}}}",
            self.0.steps_delivered,
            self.0.efficiency,
            self.0.cpu_efficiency,
            self.0.hosts.added,
            self.0.hosts.lost,
            self.0.step_copies
        )
    }
}

/// Serves steps as a WoDi worker (this process was started with
/// `--wodi-connect=`): each step's bytes go to `step(data)`, whose returned
/// bytes (or str, sent as UTF-8) are the result; an exception fails the
/// step with its traceback. The init data's bytes go to `init(data)` first.
#[pyfunction]
#[pyo3(signature = (step, init=None))]
fn serve_worker(step: PyObject, init: Option<PyObject>) -> PyResult<()> {
    let mut worker = wodi::worker::Worker::new().on_step_raw(move |_, data| {
        Python::with_gil(|py| {
            let out = step
                .call1(py, (PyBytes::new(py, data),))
                .map_err(|e| format_exception(py, e))?;
            result_bytes(out.bind(py))
        })
    });
    if let Some(init) = init {
        worker = worker.on_init_raw(move |data| {
            Python::with_gil(|py| {
                init.call1(py, (PyBytes::new(py, data),))
                    .map(drop)
                    .map_err(|e| format_exception(py, e))
            })
        });
    }
    // The worker's handlers are not `Send`: it runs holding the GIL, which
    // each step takes again (re-entrantly) to call Python.
    worker.run().map_err(runtime_error)
}

/// A step function's return value as the result's bytes.
fn result_bytes(out: &Bound<'_, PyAny>) -> Result<Vec<u8>, String> {
    if let Ok(b) = out.downcast::<PyBytes>() {
        return Ok(b.as_bytes().to_vec());
    }
    if let Ok(s) = out.extract::<String>() {
        return Ok(s.into_bytes());
    }
    let kind = out
        .get_type()
        .name()
        .map_or_else(|_| "?".to_string(), |n| n.to_string());
    Err(format!("the step returned a {kind}, not bytes or str"))
}

/// Serves steps as a command worker: each step's data is a shell command
/// line, its result the command's standard output (`wodi::cmd`).
#[pyfunction]
fn serve_commands() -> PyResult<()> {
    let worker = wodi::worker::Worker::new().on_step_raw(|_, line| wodi::cmd::run_command(line));
    worker.run().map_err(runtime_error)
}

/// Runs the WoDi server role (`WODI_ROLE=server` set by the master).
#[pyfunction]
fn server_main(py: Python<'_>) -> PyResult<()> {
    py.allow_threads(wodi::server_main).map_err(runtime_error)
}

/// A failed step's reason: the exception's `wodi_reason` (the Python side's
/// own encoding of a call's exception, `wodi/_codec.py`) where it has one,
/// else its traceback and message.
fn format_exception(py: Python<'_>, e: PyErr) -> String {
    if let Ok(reason) = e
        .value(py)
        .getattr("wodi_reason")
        .and_then(|r| r.extract::<String>())
    {
        return reason;
    }
    let tb = e
        .traceback(py)
        .and_then(|tb| tb.format().ok())
        .unwrap_or_default();
    format!("{tb}{e}")
}

/// Whether a pool is configured the way `carmi` finds one (flags aside):
/// the environment, a running `carmi pool up`, or the user's config file
/// name a local RM and a secret.
#[pyfunction]
fn pool_configured() -> PyResult<bool> {
    let coords = carmi_api::coords::resolve(&Default::default(), &|k| std::env::var(k).ok())
        .map_err(runtime_error)?;
    Ok(coords.local.is_some() && coords.secret.is_some())
}

/// Runs the `carmi` command carried in this module (`python -m
/// wodi._carmi ARGS`): `args` is its command line, program name first;
/// `launcher` runs this same command again (the background pool of `pool
/// up`). Returns the exit status. The whole `carmi` is linked in, daemons
/// of the embedded pool included, so that the wheel needs no `carmi`
/// installed beside it.
#[pyfunction]
fn carmi(py: Python<'_>, args: Vec<String>, launcher: Vec<String>) -> u8 {
    let args = args.into_iter().map(Into::into).collect();
    let launcher = launcher.into_iter().map(Into::into).collect();
    py.allow_threads(|| carmi_cli::run(args, Some(launcher)))
}

#[pymodule]
fn _native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<NativePool>()?;
    m.add_class::<Waker>()?;
    m.add_function(wrap_pyfunction!(serve_worker, m)?)?;
    m.add_function(wrap_pyfunction!(serve_commands, m)?)?;
    m.add_function(wrap_pyfunction!(server_main, m)?)?;
    m.add_function(wrap_pyfunction!(pool_configured, m)?)?;
    m.add_function(wrap_pyfunction!(carmi, m)?)?;
    Ok(())
}
