//! A whole CARMI pool in one process, played by simulated owners.
//!
//! To develop, test, demonstrate and measure an opportunistic pool without a
//! building full of desktops, this crate starts an embedded pool: one global
//! RM and N local RMs as tasks of the calling process, each with its own
//! folder and a varied machine ad, whose owners come and go as an owner model
//! (crate `owner-model`) says, played in wall time with a speed-up factor.
//! `carmi pool up`, the WoDi examples and the benchmarks start their pools
//! with it; it links both daemons, which is why the pure owner models live
//! apart.
//!
//! # Layout
//! - `driver`: plays a schedule to local RMs (or any [`driver::OwnerTarget`]) in wall time with a speed-up.
//! - `pool`: [`EmbeddedPool`]: global + N local RMs in-process, their folders, machine ads, clean-up.
//! - `sweep`: removal of folders (and job processes) left by pools whose process was killed.
//! - `model`, `stochastic`, `trace`: the owner models of `owner-model`, re-exported because
//!   [`PoolOptions`] names them (and so that code written against the former `owner-sim` paths compiles).
//! - `bin/owner-sim.rs`: the `owner-sim` tool: `schedule` prints a model's events as a trace,
//!   `pool` runs a pool in the foreground, `drive` plays owners to running local RMs.

#![warn(missing_docs)]

pub mod driver;
pub mod pool;
pub mod sweep;

pub use owner_model::{model, stochastic, trace};

use std::path::PathBuf;

pub use owner_model::{
    OwnerModel, Regime, Scheduled, Shape, Stochastic, Trace, TraceError, format_schedule,
};
pub use pool::{EmbeddedPool, PoolHost, PoolOptions};

/// The owner model of a command-line spec (`none`, `stochastic`,
/// `trace:FILE`), reading `FILE` from disk: `owner-model` itself does no I/O.
pub fn read_owner_model(spec: &str) -> Result<OwnerModel, owner_model::Error> {
    OwnerModel::from_spec_with(spec, std::fs::read_to_string)
}

/// Everything that can go wrong in this crate.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A file or directory could not be used.
    #[error("{what} {path}: {source}")]
    Io {
        /// What was being done.
        what: &'static str,
        /// The path involved.
        path: PathBuf,
        /// The cause.
        source: std::io::Error,
    },
    /// The owner model is wrong (a bad trace file, bad parameters).
    #[error(transparent)]
    Model(#[from] owner_model::Error),
    /// The pool options make no sense.
    #[error("pool options: {0}")]
    BadOptions(String),
    /// The global RM could not start.
    #[error("global RM: {0}")]
    Global(#[from] carmi_global::Error),
    /// A local RM could not start.
    #[error("local RM {host}: {error}")]
    Local {
        /// Its name.
        host: String,
        /// Why (boxed: it is large, and rare).
        error: Box<carmi_local::Error>,
    },
    /// The pool secret could not be made or read.
    #[error("pool secret: {0}")]
    Secret(#[from] carmi_api::handshake::HandshakeError),
    /// The pool did not come up.
    #[error("the pool did not come up: {0}")]
    NotReady(String),
}
