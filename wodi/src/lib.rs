//! WoDi: a master-worker framework on CARMI.
//!
//! A master hands out work steps and collects results; WoDi keeps the desired
//! number of workers running on whatever hosts the pool offers, re-sends the
//! step of a lost worker, and delivers the result of every step exactly once.
//! Three roles take part, and they may all be one executable:
//! - the **master** links [`master`] and calls [`master::Master::init`], which
//!   starts the server by re-executing the current executable (or a given one);
//! - the **server** ([`server`]) holds the CARMI connection and drives the
//!   run's pure core (`wodi_core::run::Run`); an executable becomes the server when [`enter`] sees `WODI_ROLE=server`;
//! - **workers** call [`worker::Worker::run`]; the server starts them with a
//!   `--wodi-connect=` argument telling them where to connect.
//!
//! # Layout
//! - `ids`, `proto`, `run`, `sched`, `order`, `plan`, `profile`, `speed`, `stats`:
//!   the pure core, re-exported from the `wodi-core` crate (no I/O, no tokio).
//! - `checkpoint`: the master's checkpoint file (last completed cycle, its state, the history).
//! - `conn`: batching frame writer and frame reader tasks.
//! - `server`: the tokio driver of the core: CARMI client, worker and master connections.
//! - `master`: the master library.
//! - `worker`: the worker library (blocking, one step at a time, CPU time measured per step).
//! - `simple`: the blocking facade for a parallel map ([`Pool`], [`serve`]),
//!   beside the full `master` API it drives.
//! - `cmd`: the command worker's step format (a step is a shell command line).
//!
//! The simulator that drives `sched` in virtual time on modelled owners, and
//! the WoDi benchmarks, are the `wodi-sim` crate: a program using WoDi
//! compiles neither the owner models nor the daemons.

#![warn(missing_docs)]

pub mod checkpoint;
pub mod cmd;
pub mod conn;
pub mod master;
pub mod server;
pub mod server_log;
pub mod simple;
pub mod worker;

// The pure core lives in `wodi-core` (which the compiler keeps free of I/O
// and tokio); re-exported under the old paths so that programs using WoDi,
// the simulator and the examples need one crate.
pub use wodi_core::{ids, order, plan, profile, proto, run, sched, speed, stats};

pub use ids::{CycleId, StepId, WorkerId};
pub use proto::Status;
pub use simple::{Pool, PoolBuilder, serve, serve_worker};
pub use stats::Stats;

/// Environment variable naming the role this process was started in.
pub const ENV_ROLE: &str = "WODI_ROLE";
/// Environment variable holding the run's token (server role).
pub const ENV_TOKEN: &str = "WODI_TOKEN";
/// Environment variable (optional): the address workers should dial the server at.
pub const ENV_ADVERTISE: &str = "WODI_ADVERTISE_HOST";

/// Call first in `main` of an executable that may be started as the WoDi
/// server: if `WODI_ROLE=server`, it runs the server and exits the process;
/// otherwise it returns at once.
pub fn enter() {
    if std::env::var(ENV_ROLE).as_deref() != Ok("server") {
        return;
    }
    let code = match server_main() {
        Ok(()) => 0,
        Err(e) => {
            eprintln!("wodi server: {e:#}");
            1
        }
    };
    std::process::exit(code);
}

/// Runs the server role from the environment: `WODI_TOKEN`, `CARMI_LOCAL`,
/// `CARMI_SECRET_FILE` (and optionally `CARMI_JOB`, `WODI_ADVERTISE_HOST`).
pub fn server_main() -> anyhow::Result<()> {
    let _ = tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn")),
        )
        .with_writer(std::io::stderr)
        // Its stderr is usually a log file: colour codes only on a terminal.
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .try_init();
    let token = std::env::var(ENV_TOKEN)
        .map_err(|_| anyhow::anyhow!("{ENV_TOKEN} is not set (the master sets it)"))?;
    let mut carmi = carmi_api::client::ConnectOptions::from_env()?;
    // The server is a new process of the run, never one the RM started.
    carmi.process = None;
    let opts = server::ServerOptions {
        token,
        carmi,
        listen: "0.0.0.0:0".into(),
        advertise_host: std::env::var(ENV_ADVERTISE).ok().filter(|s| !s.is_empty()),
        loss_grace: std::time::Duration::from_millis(500),
    };
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    rt.block_on(server::run(opts))
}
