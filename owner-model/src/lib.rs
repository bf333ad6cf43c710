//! Simulated machine owners, as pure schedules in virtual time.
//!
//! An opportunistic pool lives by its owners coming and going. To develop,
//! test and measure that without a building full of desktops, this crate
//! models owners (randomly with a day/night rhythm, or replayed from a trace)
//! and turns a model into a deterministic, seeded schedule of owner events in
//! virtual time. It does no I/O (a caller reads a trace file and hands in its
//! text) and has no clock:
//! a simulator reads the virtual times directly, and the embedded pool
//! (`carmi-pool`) plays them in wall time.
//!
//! # Layout
//! - `stochastic`: the stochastic owner (present/absent periods, working hours vs off hours) and its documented defaults.
//! - `trace`: the trace file format, its parser (errors carry line numbers) and the host names it uses.
//! - `model`: [`OwnerModel`] (none, stochastic, trace), the merged, time-ordered [`Scheduled`] stream, `schedule` and its trace-format writer.

#![warn(missing_docs)]

pub mod model;
pub mod stochastic;
pub mod trace;

use std::path::PathBuf;

pub use model::{OwnerModel, OwnerStream, Scheduled, format_schedule};
pub use stochastic::{Regime, Shape, Stochastic};
pub use trace::{Trace, TraceError, host_name};

/// Everything that can go wrong with an owner model.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A trace file could not be read (by the reader the caller handed to
    /// [`OwnerModel::from_spec_with`]).
    #[error("{what} {path}: {source}")]
    Io {
        /// What was being done.
        what: &'static str,
        /// The path involved.
        path: PathBuf,
        /// The cause.
        source: std::io::Error,
    },
    /// A trace file has a mistake.
    #[error("trace file {path}: {error}")]
    Trace {
        /// The file.
        path: PathBuf,
        /// The line and what is wrong.
        error: TraceError,
    },
    /// An owner model's parameters make no sense.
    #[error("owner model: {0}")]
    BadModel(String),
}
