//! WoDi's pure core: every decision of a WoDi run, as state machines fed
//! inputs and `now` and drained of outputs.
//!
//! No I/O, no wall clock and no async runtime (the crate's dependency tree
//! has no tokio, checked by carmi-tests' `tests/structure.rs`), so the WoDi server drives it
//! over real connections and the simulator drives it in virtual time.
//!
//! # Layout (lower modules first; a module imports only modules above it)
//! - `time`: the core's time type.
//! - `ids`: newtype ids (steps, workers, cycles), from CARMI's id macro.
//! - `plan`: work history, saved estimates and cycle planning (longest first,
//!   earliest finish, fewest hosts).
//! - `stats`: run statistics (occupancy, CPU time, efficiency, timeline), progress counts.
//! - `progress`: a run's progress as job attributes (`SetJobAttrs`) for `carmi q` and the dashboard.
//! - `sched`: the scheduler core, a pure state machine driven with virtual time in tests.
//! - `order`: history-based dispatch (longest first, earliest finish).
//! - `speed`: host speed from a class, the machine ad or a benchmark step, refined by observed times.
//! - `proto`: the messages of master, server and worker connections.
//! - `profile`: step-time profiles (the paper's materials application).
//! - `run`: every decision of the WoDi server around the scheduler (masters,
//!   classes, fewest hosts, contexts, benchmark, CARMI requests, loss grace).

#![warn(missing_docs)]

pub mod ids;
pub mod order;
pub mod plan;
pub mod profile;
pub mod progress;
pub mod proto;
pub mod run;
pub mod sched;
pub mod speed;
pub mod stats;
pub mod time;

pub use ids::{CycleId, StepId, WorkerId};
pub use proto::Status;
pub use stats::Stats;
