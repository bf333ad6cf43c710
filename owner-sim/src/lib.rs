//! Simulated machine owners, and a whole CARMI pool in one process.
//!
//! An opportunistic pool lives by its owners coming and going. To develop,
//! test and demonstrate that without a building full of desktops, this crate
//! models owners (randomly with a day/night rhythm, or replayed from a trace),
//! turns a model into a deterministic, seeded schedule of owner events in
//! virtual time, plays a schedule to running local RMs in wall time with a
//! speed-up factor, and starts an embedded pool: one global RM and N local
//! RMs as tasks of the calling process, each with its own folder and a
//! varied machine ad, driven by the chosen owner model.
//!
//! # Layout
//! - `stochastic`, `trace`, `model`: the owner models, re-exported from the pure crate `owner-model`.
//! - `driver`: plays a schedule to local RMs (or any [`driver::OwnerTarget`]) in wall time with a speed-up.
//! - `pool`: [`EmbeddedPool`]: global + N local RMs in-process, their folders, machine ads, clean-up.
//! - `sweep`: removal of folders (and job processes) left by pools whose process was killed.
//! - `bin/owner-sim.rs`: the `owner-sim` tool: `schedule` prints a model's events as a trace, `pool` runs a pool in the foreground.

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
