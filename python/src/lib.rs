//! The native half of the Python package `wodi`: a blocking [`wodi::Pool`]
//! whose steps carry opaque text (the Python side pickles a function and
//! its input), the worker loop that hands each step to a Python callable,
//! and the server role (`python -m wodi._server`).

use pyo3::exceptions::PyRuntimeError;
use pyo3::prelude::*;

use wodi::master::ServerCommand;

fn runtime_error(e: impl std::fmt::Display) -> PyErr {
    PyRuntimeError::new_err(format!("{e:#}"))
}

/// A running WoDi computation (see `wodi.Pool` for the Python surface).
#[pyclass(unsendable)]
struct NativePool {
    pool: Option<wodi::Pool>,
}

#[pymethods]
impl NativePool {
    /// Starts the server (`server` with `server_args`) and the run: `hosts`
    /// workers running `worker` with `worker_args` on hosts matching
    /// `requirements`; the pool from `local`/`secret` or found as `carmi` finds it.
    #[new]
    #[pyo3(signature = (worker, worker_args, hosts, requirements, server, server_args, local=None, secret=None))]
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
    ) -> PyResult<Self> {
        let mut builder = wodi::Pool::builder()
            .hosts(hosts)
            .requirements(&requirements)
            .worker(worker, worker_args)
            .configure(|cfg| {
                cfg.server = ServerCommand::Command {
                    program: server.into(),
                    args: server_args,
                }
            });
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
    fn map(&mut self, py: Python<'_>, inputs: Vec<String>) -> PyResult<Vec<(bool, String)>> {
        let pool = self
            .pool
            .as_mut()
            .ok_or_else(|| runtime_error("the pool is closed"))?;
        let n = inputs.len();
        let outcomes = py.allow_threads(|| -> Result<Vec<(bool, String)>, wodi::simple::Error> {
            let mut out = vec![(false, String::new()); n];
            for item in pool.stream::<_, String>(inputs)? {
                match item {
                    Ok((i, r)) => out[i] = (true, r),
                    Err(wodi::simple::Error::Step { index, reason, .. }) => {
                        out[index] = (false, reason)
                    }
                    Err(e) => return Err(e),
                }
            }
            Ok(out)
        });
        outcomes.map_err(runtime_error)
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
            self.0.hosts_added,
            self.0.hosts_lost,
            self.0.step_copies
        )
    }
}

/// Serves steps as a WoDi worker (this process was started with
/// `--wodi-connect=`): each step's text goes to `step(text)`, whose returned
/// text is the result; an exception fails the step with its message.
#[pyfunction]
fn serve_worker(step: PyObject) -> PyResult<()> {
    let worker = wodi::worker::Worker::new().on_step_raw(move |_, data| {
        Python::with_gil(|py| {
            let text = std::str::from_utf8(data).map_err(|e| format!("step data: {e}"))?;
            let text: String = serde_json_str(text)?;
            let out = step
                .call1(py, (text,))
                .and_then(|r| r.extract::<String>(py))
                .map_err(|e| format_exception(py, e))?;
            Ok(json_string(&out).into_bytes())
        })
    });
    worker.run().map_err(runtime_error)
}

/// Runs the WoDi server role (`WODI_ROLE=server` set by the master).
#[pyfunction]
fn server_main(py: Python<'_>) -> PyResult<()> {
    py.allow_threads(wodi::server_main).map_err(runtime_error)
}

fn format_exception(py: Python<'_>, e: PyErr) -> String {
    let tb = e
        .traceback(py)
        .and_then(|tb| tb.format().ok())
        .unwrap_or_default();
    format!("{tb}{e}")
}

/// The step texts are JSON strings of base64 (see `wodi/__init__.py`):
/// only `"` delimits them, no escapes occur.
fn serde_json_str(text: &str) -> Result<String, String> {
    text.strip_prefix('"')
        .and_then(|t| t.strip_suffix('"'))
        .filter(|t| !t.contains(['"', '\\']))
        .map(str::to_string)
        .ok_or_else(|| format!("step data is not a base64 JSON string: {text:.80}"))
}

fn json_string(base64: &str) -> String {
    format!("\"{base64}\"")
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

#[pymodule]
fn _native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<NativePool>()?;
    m.add_function(wrap_pyfunction!(serve_worker, m)?)?;
    m.add_function(wrap_pyfunction!(server_main, m)?)?;
    m.add_function(wrap_pyfunction!(pool_configured, m)?)?;
    Ok(())
}
